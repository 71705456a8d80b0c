// Replacing a whole folder all or nothing: the new contents are built in a stage folder beside the
// old one and swapped in by renames, so a failure (bad input, a full disk, an exception) leaves
// the previous folder exactly as it was. For folders one writer fills in full (lra --generate's
// data); folders that merge old and new files have their own commit (data/lm_prepare.cpp).
#pragma once
#include <functional>
#include <string>

namespace hh {

// Runs fill(stage) on a fresh folder "<dir>.stage.<pid>" beside `dir`, then puts the stage in
// dir's place: an existing dir is first renamed to "<dir>.old.<pid>" and removed after the swap.
// When fill throws, the stage is removed, dir is untouched and the error propagates. Stages and
// old copies left by processes that died (SIGKILL, power loss) are removed first, by
// temp_owner_gone's rules (core/atomic_file.h); a dead writer's old copy is put back when dir is
// missing (it died between the two renames).
void replace_dir(const std::string& dir, const std::function<void(const std::string& stage)>& fill);

}  // namespace hh
