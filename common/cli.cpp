#include "common/cli.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <iostream>
#include <sstream>

namespace wb {

Cli& Cli::option(const std::string& name, int* target, const std::string& help, int max) {
  options_.push_back({name, Kind::positive_int, target, {}, help, max});
  return *this;
}

Cli& Cli::option(const std::string& name, std::uint64_t* target, const std::string& help) {
  options_.push_back({name, Kind::u64, target, {}, help});
  return *this;
}

Cli& Cli::option(const std::string& name, std::string* target, std::vector<std::string> choices,
                 const std::string& help) {
  options_.push_back({name, Kind::choice, target, std::move(choices), help});
  return *this;
}

Cli& Cli::option(const std::string& name, std::string* target, const std::string& help) {
  options_.push_back({name, Kind::text, target, {}, help});
  return *this;
}

Cli& Cli::flag(const std::string& name, bool* target, const std::string& help) {
  options_.push_back({name, Kind::flag, target, {}, help});
  return *this;
}

const Cli::Option* Cli::find(const std::string& name) const {
  for (const Option& opt : options_)
    if (opt.name == name) return &opt;
  return nullptr;
}

int Cli::error(const std::string& message) const {
  std::cerr << program_ << ": error: " << message << '\n';
  return 2;
}

bool Cli::assign(const Option& opt, const std::string& value) {
  switch (opt.kind) {
    case Kind::positive_int: {
      char* end = nullptr;
      errno = 0;
      const long long v = std::strtoll(value.c_str(), &end, 10);
      if (value.empty() || !std::isdigit(static_cast<unsigned char>(value[0])) || *end != '\0' ||
          errno == ERANGE || v <= 0 || v > opt.max) {
        error(opt.name + " expects a positive integer up to " + std::to_string(opt.max) +
              ", got '" + value + "'");
        return false;
      }
      *static_cast<int*>(opt.target) = static_cast<int>(v);
      return true;
    }
    case Kind::u64: {
      char* end = nullptr;
      errno = 0;
      const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
      if (value.empty() || !std::isdigit(static_cast<unsigned char>(value[0])) || *end != '\0' ||
          errno == ERANGE) {
        error(opt.name + " expects a non-negative integer, got '" + value + "'");
        return false;
      }
      *static_cast<std::uint64_t*>(opt.target) = v;
      return true;
    }
    case Kind::choice: {
      for (const std::string& c : opt.choices) {
        if (c == value) {
          *static_cast<std::string*>(opt.target) = value;
          return true;
        }
      }
      std::string list;
      for (const std::string& c : opt.choices) list += (list.empty() ? "" : ", ") + c;
      error(opt.name + " expects one of " + list + ", got '" + value + "'");
      return false;
    }
    case Kind::text:
      if (value.empty() || value.rfind("--", 0) == 0) {
        error(opt.name + " expects a value, got '" + value + "'");
        return false;
      }
      *static_cast<std::string*>(opt.target) = value;
      return true;
    case Kind::flag: break;
  }
  return false;
}

int Cli::parse(int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::cout << usage();
      return 0;
    }
    std::string value;
    bool has_value = false;
    if (const auto eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg = arg.substr(0, eq);
      has_value = true;
    }
    const Option* opt = find(arg);
    if (opt == nullptr) return error("unknown option '" + arg + "' (see --help)");
    if (opt->kind == Kind::flag) {
      if (has_value) return error(arg + " takes no value");
      *static_cast<bool*>(opt->target) = true;
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) return error(arg + " needs a value");
      value = argv[++i];
    }
    if (!assign(*opt, value)) return 2;
  }
  return -1;
}

std::string Cli::usage() const {
  std::ostringstream out;
  out << "usage: " << program_ << " [options]\n" << summary_ << "\n\noptions:\n";
  for (const Option& opt : options_) {
    std::string name = opt.name;
    if (opt.kind == Kind::positive_int) name += " N";
    if (opt.kind == Kind::u64) name += " SEED";
    if (opt.kind == Kind::text) name += " VALUE";
    if (opt.kind == Kind::choice) {
      name += " {";
      for (std::size_t i = 0; i < opt.choices.size(); ++i) name += (i ? "|" : "") + opt.choices[i];
      name += "}";
    }
    out << "  " << name << std::string(name.size() < 28 ? 28 - name.size() : 1, ' ') << opt.help
        << '\n';
  }
  out << "  --help" << std::string(22, ' ') << "this text\n" << epilog_;
  return out.str();
}

bool parse_backend(const std::string& name, Backend* backend, std::string* why) {
  if (name == "cpu") *backend = Backend::cpu;
  else if (name == "sim") *backend = Backend::sim;
  else if (name == "cuda") *backend = Backend::cuda;
  else {
    *why = "unknown backend '" + name + "' (cpu, sim or cuda)";
    return false;
  }
  if (*backend == Backend::cuda && !cuda_available()) {
    *why = "--backend cuda needs a CUDA GPU: " + cuda_device_description();
    return false;
  }
  return true;
}

}  // namespace wb
