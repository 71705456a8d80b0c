// convert_gpt2: the command-line app of the driver cli/convert_gpt2.cpp (its flags, presets and run; --help).
#include "cli/app.h"
#include "cli/drivers.h"

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, hh::cli::convert_gpt2); }
