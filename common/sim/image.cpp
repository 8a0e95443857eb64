// The program image for the instrumented simulator: segments (dl_iterate_phdr), static
// objects (nm) and source lines (addr2line). Both tools come with binutils, which every
// toolchain that built the program has; without them the messages say less, nothing breaks.
#include "common/sim/image.hpp"

#include <link.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>

#include "common/sim/runtime.hpp"

namespace wb::sim::detail {
namespace {

struct Image {
  std::string path;             // the executable
  std::uintptr_t bias = 0;      // load address of a position-independent executable
  std::vector<std::pair<std::uintptr_t, std::uintptr_t>> segments;  // PT_LOAD, [lo, hi)
  std::vector<StaticObject> objects;                                // sorted by lo
  bool objects_read = false;
};

Image& image() {
  static Image img = [] {
    Image i;
    char path[4096];
    const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
    if (n > 0) i.path.assign(path, static_cast<std::size_t>(n));
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) {
          auto* out = static_cast<Image*>(data);
          out->bias = info->dlpi_addr;
          for (int s = 0; s < info->dlpi_phnum; ++s) {
            const ElfW(Phdr)& ph = info->dlpi_phdr[s];
            if (ph.p_type != PT_LOAD) continue;
            const std::uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
            out->segments.emplace_back(lo, lo + ph.p_memsz);
          }
          return 1;  // the first entry is the main program
        },
        &i);
    return i;
  }();
  return img;
}

std::string quoted(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') {
      q += "'\\''";
    } else {
      q += c;
    }
  }
  return q + "'";
}

/// The output of a shell command, or "" when it cannot run.
std::string run(const std::string& command) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  pclose(pipe);
  return out;
}

/// "f<256>(float*, int)::tile" -> "f<256>": the function owning a function-local static.
std::string owner_of(const std::string& name) {
  if (name.find(" for ") != std::string::npos) return "";  // "guard variable for ...", ...
  const std::size_t last = name.rfind("::");
  if (last == std::string::npos || last == 0) return "";
  std::size_t close = last;  // just after the parameter list's ')'
  if (close >= 6 && name.compare(close - 6, 6, " const") == 0) close -= 6;
  if (close == 0 || name[close - 1] != ')') return "";  // not "<function>(...)::<variable>"
  int depth = 0;
  for (std::size_t i = close; i-- > 0;) {
    if (name[i] == ')') ++depth;
    if (name[i] == '(' && --depth == 0) return without_anonymous_namespaces(name.substr(0, i));
  }
  return "";
}

void read_objects(Image& img) {
  img.objects_read = true;
  if (img.path.empty()) return;
  std::istringstream in(run("nm -S -C --defined-only " + quoted(img.path) + " 2>/dev/null"));
  std::string line;
  while (std::getline(in, line)) {
    char type = 0;
    std::uint64_t addr = 0, size = 0;
    int name_at = 0;
    if (std::sscanf(line.c_str(), "%" SCNx64 " %" SCNx64 " %c %n", &addr, &size, &type,
                    &name_at) != 3 ||
        size == 0 || std::strchr("bBdDuVrR", type) == nullptr) {
      continue;
    }
    StaticObject o;
    o.lo = img.bias + addr;
    o.hi = o.lo + size;
    o.name = line.substr(static_cast<std::size_t>(name_at));
    o.owner = owner_of(o.name);
    o.writable = std::strchr("rR", type) == nullptr;
    img.objects.push_back(std::move(o));
  }
  std::sort(img.objects.begin(), img.objects.end(),
            [](const StaticObject& a, const StaticObject& b) { return a.lo < b.lo; });
}

std::string relative(const std::string& file_line) {
  const std::size_t colon = file_line.rfind(':');
  if (colon == std::string::npos) return file_line;
  const std::string file = file_line.substr(0, colon);
  return site_string(Site{file.c_str(), std::atoi(file_line.c_str() + colon + 1)});
}

/// For each pc, its frames' file:line, innermost first ("?" when unknown).
std::vector<std::vector<std::string>> frames_of(const std::vector<const void*>& pcs) {
  std::vector<std::vector<std::string>> frames(pcs.size());
  Image& img = image();
  if (pcs.empty() || img.path.empty()) return frames;
  std::string command = "addr2line -i -a -e " + quoted(img.path);
  for (const void* pc : pcs) {
    // The return address points after the call: the access is the instruction before.
    char addr[32];
    std::snprintf(addr, sizeof addr, " 0x%" PRIxPTR,
                  reinterpret_cast<std::uintptr_t>(pc) - 1 - img.bias);
    command += addr;
  }
  std::istringstream in(run(command + " 2>/dev/null"));
  std::string line;
  int index = -1;
  while (std::getline(in, line)) {
    if (line.rfind("0x", 0) == 0) {
      ++index;
    } else if (index >= 0 && static_cast<std::size_t>(index) < pcs.size()) {
      frames[static_cast<std::size_t>(index)].push_back(
          line.rfind("??", 0) == 0 ? std::string("?") : relative(line.substr(0, line.find(' '))));
    }
  }
  return frames;
}

std::string unknown_line(const void* pc) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "pc %p (no line information)", pc);
  return buf;
}

}  // namespace

std::string without_anonymous_namespaces(std::string name) {
  for (const char* anon : {"(anonymous namespace)::", "{anonymous}::"}) {
    for (std::size_t at; (at = name.find(anon)) != std::string::npos;) {
      name.erase(at, std::strlen(anon));
    }
  }
  return name;
}

bool in_program_image(std::uintptr_t address) {
  for (const auto& [lo, hi] : image().segments) {
    if (address >= lo && address < hi) return true;
  }
  return false;
}

const StaticObject* static_object_near(std::uintptr_t address) {
  static std::mutex mutex;
  std::lock_guard<std::mutex> lock(mutex);
  Image& img = image();
  if (!img.objects_read) read_objects(img);
  auto after = std::upper_bound(img.objects.begin(), img.objects.end(), address,
                                [](std::uintptr_t a, const StaticObject& o) { return a < o.lo; });
  if (after == img.objects.begin()) return nullptr;
  return &*std::prev(after);
}

std::string source_line(const void* pc) {
  const std::vector<std::string> frames = frames_of({pc})[0];
  if (frames.empty() || frames[0] == "?") return unknown_line(pc);
  std::string out = frames[0];
  for (std::size_t i = 1; i < frames.size(); ++i) out += ", inlined into " + frames[i];
  return out;
}

std::vector<std::string> kernel_lines(const std::vector<const void*>& pcs) {
  const std::vector<std::vector<std::string>> frames = frames_of(pcs);
  std::vector<std::string> lines(pcs.size());
  for (std::size_t i = 0; i < pcs.size(); ++i) {
    const std::vector<std::string>& f = frames[i];
    if (f.empty() || f[0] == "?") {
      lines[i] = unknown_line(pcs[i]);
      continue;
    }
    lines[i] = f[0];
    for (const std::string& frame : f) {
      if (frame.rfind("common/", 0) != 0) {
        lines[i] = frame;
        break;
      }
    }
  }
  return lines;
}

}  // namespace wb::sim::detail
