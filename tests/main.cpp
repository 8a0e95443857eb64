// doctest's main for every test binary of the workbook.
//
// `--wb-require-gpu` marks a run of the `cuda` suite: with no usable GPU it prints why and
// exits with 77, which CTest reports as skipped (SKIP_RETURN_CODE), never as passed.
// `--wb-require-sm90a` marks the `cuda` suite of sm_90a code (the Hopper kernels: chapter 11,
// tests/hopper): the same, with any GPU but one of compute capability 9.0 (an H100 or H200).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstring>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "common/backend.hpp"

namespace {

constexpr int kSkipped = 77;

// `--reporters=wb-check`: one line per test case, PASS or FAIL, then one line per subcase
// (tests use a SUBCASE per kernel, so a learner sees which kernel of a ladder fails), and for
// a failed case its first failed check with the context the test captured (kernel, shape,
// input) and the worst element. Used by `./wb exercise check NN` and the exercise-stub tests.
class CheckReporter : public doctest::IReporter {
 public:
  explicit CheckReporter(const doctest::ContextOptions& options) : out_(*options.cout) {}

  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    out_ << (stats.numTestCasesFailed ? "Status: FAILURE" : "Status: SUCCESS") << " ("
         << stats.numTestCasesFailed << " of " << stats.numTestCasesPassingFilters
         << " test cases failed)\n";
  }
  void test_case_start(const doctest::TestCaseData& test_case) override {
    test_case_ = &test_case;
    first_failure_.clear();
    subcases_.clear();
    path_.clear();
  }
  void test_case_reenter(const doctest::TestCaseData&) override { path_.clear(); }
  void test_case_end(const doctest::CurrentTestCaseStats& stats) override {
    const bool failed = stats.failure_flags != 0 || !first_failure_.empty();
    out_ << (failed ? "  [FAIL] " : "  [PASS] ") << test_case_->m_name << '\n';
    for (const Subcase& sc : subcases_)
      out_ << (sc.failed ? "    [FAIL] " : "    [PASS] ") << sc.path << '\n';
    if (failed && !first_failure_.empty()) out_ << first_failure_;
  }
  void test_case_exception(const doctest::TestCaseException& e) override {
    mark_failed();
    if (first_failure_.empty())
      first_failure_ = std::string("         exception: ") + e.error_string.c_str() + "\n";
  }
  void subcase_start(const doctest::SubcaseSignature& signature) override {
    path_.push_back(signature.m_name.c_str());
    std::string path;
    for (const std::string& name : path_) path += (path.empty() ? "" : " / ") + name;
    if (find(path) == nullptr) subcases_.push_back({path, false});
  }
  void subcase_end() override {
    if (!path_.empty()) path_.pop_back();
  }
  void log_assert(const doctest::AssertData& a) override {
    if (!a.m_failed) return;
    mark_failed();
    if (!first_failure_.empty()) return;
    std::ostringstream s;
    s << "         " << a.m_file << ':' << a.m_line << ": " << a.m_expr << '\n';
    const int n = doctest::IReporter::get_num_active_contexts();
    const doctest::IContextScope* const* contexts = doctest::IReporter::get_active_contexts();
    for (int i = 0; i < n; ++i) {
      s << "         ";
      contexts[i]->stringify(&s);
      s << '\n';
    }
    first_failure_ = s.str();
  }
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}

 private:
  struct Subcase {
    std::string path;
    bool failed;
  };
  Subcase* find(const std::string& path) {
    for (Subcase& sc : subcases_)
      if (sc.path == path) return &sc;
    return nullptr;
  }
  // A failure inside a subcase fails it and every subcase around it.
  void mark_failed() {
    std::string path;
    for (const std::string& name : path_) {
      path += (path.empty() ? "" : " / ") + name;
      if (Subcase* sc = find(path)) sc->failed = true;
    }
  }

  std::ostream& out_;
  const doctest::TestCaseData* test_case_ = nullptr;
  std::string first_failure_;
  std::vector<Subcase> subcases_;
  std::vector<std::string> path_;
};

REGISTER_REPORTER("wb-check", 1, CheckReporter);

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  bool require_gpu = false, require_sm90a = false;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--wb-require-gpu") == 0) {
      require_gpu = true;
    } else if (std::strcmp(argv[i], "--wb-require-sm90a") == 0) {
      require_sm90a = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  if (require_gpu && !wb::cuda_available()) {
    std::cout << "SKIPPED: " << wb::cuda_device_description() << '\n';
    return kSkipped;
  }
  if (require_sm90a) {
    const std::string why = wb::why_no_sm90a();
    if (!why.empty()) {
      std::cout << "SKIPPED: " << why << '\n';
      return kSkipped;
    }
  }
  doctest::Context context(static_cast<int>(args.size()), args.data());
  return context.run();
}
