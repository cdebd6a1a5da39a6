// `verify --dump DIR`: the global tensors of one strategy as .npy files and a meta.json
// (DESIGN's dump format). Their comparison is bench/verify_bound.h.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "bench/config.h"

namespace cpbench {

// Writes a float32 .npy file (C order).
void write_npy(const std::string& path, const std::vector<float>& data, const std::vector<int64_t>& shape);

// A directory name for a label that is no shell glob: "usp[u2xr2]" -> "usp_u2xr2" (characters
// outside [A-Za-z0-9._-] become '_', trailing ones are dropped). meta.json keeps the label.
std::string dump_dir_name(const std::string& label);

// Writes DIR/<dump_dir_name(label)>[/seqN]/ with every tensor of `tensors` and meta.json.
void write_dump(const RunConfig& cfg, int world_size, const std::string& label, const MeshSpec& mesh,
                const LayerShape& shape, const std::map<std::string, std::vector<float>>& tensors);

}  // namespace cpbench
