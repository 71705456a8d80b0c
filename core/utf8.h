// UTF-8 validity, one definition for every reader in core (safetensors names and metadata, pickle
// strings of PyTorch checkpoints, quoting input in error messages). Overlong forms, surrogates and
// code points past U+10FFFF are invalid, as in Python and the safetensors reference.
#pragma once
#include <cstddef>
#include <string>

namespace hh {

// Length (1-4) of the valid UTF-8 sequence starting at data[i] (i < n), or 0 when none starts there.
size_t utf8_sequence_length(const char* data, size_t n, size_t i);

// Index of the first byte that does not start a valid UTF-8 sequence, or std::string::npos.
size_t first_invalid_utf8(const char* data, size_t n);

}  // namespace hh
