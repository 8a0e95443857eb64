// A small command-line parser for the chapter programs and tools.
//
// Bad input gets one clear line on stderr and exit code 2:
//   ch01: error: --rows expects a positive integer, got 'abc'
//   ch01: error: unknown option '--colls' (see --help)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/backend.hpp"

namespace wb {

class Cli {
 public:
  Cli(std::string program, std::string summary)
      : program_(std::move(program)), summary_(std::move(summary)) {}

  /// A positive integer option, at most `max`.
  Cli& option(const std::string& name, int* target, const std::string& help, int max = 1 << 30);
  /// A non-negative 64-bit option (seeds).
  Cli& option(const std::string& name, std::uint64_t* target, const std::string& help);
  /// One of `choices`.
  Cli& option(const std::string& name, std::string* target, std::vector<std::string> choices,
              const std::string& help);
  /// Free text, such as a file name (a value starting with "--" is taken for a forgotten value).
  Cli& option(const std::string& name, std::string* target, const std::string& help);
  /// A flag without a value.
  Cli& flag(const std::string& name, bool* target, const std::string& help);
  /// Text printed after the option list by --help (extra sections, examples).
  void epilog(std::string text) { epilog_ = std::move(text); }

  /// Parses `--name value` and `--name=value`. Returns -1 when the program should go on,
  /// otherwise the exit code to return: 0 after --help, 2 after an error (already printed).
  int parse(int argc, const char* const* argv);

  /// Prints "program: error: message" to stderr and returns 2, the exit code for bad input.
  int error(const std::string& message) const;

  std::string usage() const;
  const std::string& program() const { return program_; }

 private:
  enum class Kind { positive_int, u64, choice, text, flag };
  struct Option {
    std::string name;
    Kind kind;
    void* target;
    std::vector<std::string> choices;
    std::string help;
    int max = 0;
  };
  const Option* find(const std::string& name) const;
  bool assign(const Option& opt, const std::string& value);

  std::string program_;
  std::string summary_;
  std::vector<Option> options_;
  std::string epilog_;
};

/// Maps "cpu" / "sim" / "cuda" to a Backend. For cuda, returns false and fills `why` when
/// this build or this machine cannot run it.
bool parse_backend(const std::string& name, Backend* backend, std::string* why);

}  // namespace wb
