// convert_bert: the command-line app of the driver cli/convert_bert.cpp (its flags, presets and run; --help).
#include "cli/app.h"
#include "cli/drivers.h"

int main(int argc, char** argv) { return hh::cli::run_main(argc, argv, hh::cli::convert_bert); }
