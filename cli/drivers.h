// The command-line drivers: each app's flags, presets and run as one function of argv, so that
// the app's main() and the Python module (hedgehog.convert, hedgehog.evaluate) call the same code
// with the same options, run folder and report. A driver parses argv as its app does (argv[0] is
// the program name), returns 0 (also after --help) or the app's exit status, and throws hh::Error
// with the message the app prints after "error: ".
#pragma once
#include <string>
#include <vector>

namespace hh::cli {

int convert_bert(int argc, char** argv);   // cli/convert_bert.cpp
int convert_gpt2(int argc, char** argv);   // cli/convert_gpt2.cpp
int convert_llama(int argc, char** argv);  // cli/convert_llama.cpp
int convert_vit(int argc, char** argv);    // cli/convert_vit.cpp
int eval_lm(int argc, char** argv);        // cli/eval_lm.cpp

// Runs `driver` on `args` (the flags, without the program name, which is `program`).
int run_driver(int (*driver)(int, char**), const std::string& program, const std::vector<std::string>& args);

}  // namespace hh::cli
