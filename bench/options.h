// The one table of run options. Each entry names its preset key, its command-line flag, its
// kind (which fixes the accepted JSON types and the flag's text syntax), how it sets RunConfig
// and how the report's config block shows it. The command line (CLI11), the preset reader (known
// keys, types, errors naming the key and the value) and RunConfig::to_json all walk this table;
// adding an option is one entry in bench/options.cpp plus its RunConfig field.
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/config.h"

namespace cpbench {

enum class OptKind {
  count,    // 32-bit integer (sizes of the layer, iterations ...)
  integer,  // 64-bit integer
  seed,     // 0 .. 2^64-1
  number,   // finite, >= 0
  boolean,  // preset true/false; flag --X (and --no-X when negatable)
  text,     // any UTF-8 string (file names)
  choice,   // one of `choices`
  names,    // preset: list of strings or "a,b"; flag: "a,b"
  ints,     // preset: integer or non-empty list; flag: "N[,N...]"
  size,     // bytes: preset integer or "512MiB"; flag "80GiB" (KiB, MiB, GiB, TiB)
  docs,     // --docs SPEC: preset string or list of lengths
};

struct OptionSpec {
  std::string key;   // preset key: "kv_heads"
  std::string flag;  // "--kv-heads" (empty: preset only)
  OptKind kind;
  std::string help;
  std::vector<std::string> choices;  // kind == choice
  bool negatable = false;            // boolean: also --no-X (sets false)
  // Sets the field from a value already checked by check_option_value (canonical type).
  std::function<void(RunConfig&, const nlohmann::json&)> set;
  // Integer kinds: the smallest accepted value (1: "must be positive"; 0: where 0 means none).
  int64_t min = std::numeric_limits<int64_t>::min();
  // The report's config block (RunConfig::to_json): the key it appears under and its value; empty
  // report_key: not reported on its own (run-only settings, or part of config.mesh / config.mask).
  std::string report_key{};
  std::function<nlohmann::json(const RunConfig&)> report{};
};

const std::vector<OptionSpec>& option_table();
const OptionSpec* find_option_by_key(const std::string& key);
std::string known_option_keys();  // "model, batch, ..." for error messages

// A value as a message shows it: printable ASCII as is, other bytes as \xNN (non-UTF-8 safe).
std::string printable(const std::string& text);

// "512MiB", "80GiB", "1024" -> bytes (64-bit). Throws std::invalid_argument naming `what`.
int64_t parse_size(const std::string& text, const std::string& what);

// Converts a flag's text into the canonical JSON value of its kind; throws std::invalid_argument
// naming the flag and the text.
nlohmann::json parse_option_text(const OptionSpec& o, const std::string& text);
// Checks a preset's JSON value against the option's kind and returns it in canonical form;
// throws std::invalid_argument naming `where` (origin and key) and the value.
nlohmann::json check_option_value(const OptionSpec& o, const nlohmann::json& v, const std::string& where);

// The command line, parsed. `exit_code` >= 0: stop now with that code (0: help was printed;
// 2: bad input, `error` says why; every rank gets the same result from the same argv).
struct CommandLine {
  std::string command;  // run | verify | list
  bool list_json = false;  // list --json
  int exit_code = -1;
  std::string error;
  std::string config_path;                              // --config FILE, or empty
  nlohmann::json settings = nlohmann::json::object();  // flags given, as preset keys
};
CommandLine parse_command_line(int argc, char** argv, bool print_help);

// Every flag the command-line parser takes (the same parser parse_command_line builds, so no flag
// --help shows can be missing), each with its preset key, kind, value form, choices, lower bound,
// default, help, the commands that take it and the report key it appears under: the "options"
// and "commands" of `cpbench list --json`.
nlohmann::json command_line_json();
const char* kind_name(OptKind kind);  // "count", "choice", ... (the enum's names)

}  // namespace cpbench
