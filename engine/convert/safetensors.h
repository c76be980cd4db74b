// Reading a release checkpoint: safetensors files (a u64 header length, a JSON header, the tensor
// bytes) and the sharded index model.safetensors.index.json (docs/CONVERTER.md §1.1, §1.2). Every
// header is treated as hostile and checked against its file before any byte is trusted.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "engine/convert/weight_quant.h"

namespace waste {

enum class Dtype {
  kBool,
  kU8,
  kI8,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kF64,
  kI64,
  kU64,
  kF8E4M3,
  kF8E5M2
};

// Bytes per element; the name as the header spells it.
int dtype_size(Dtype d);
const char* dtype_name(Dtype d);
// False for names this reader does not know.
bool parse_dtype(std::string_view s, Dtype* out);

struct TensorInfo {
  std::string name;
  Dtype dtype = Dtype::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // relative to the start of the data buffer

  int64_t elements() const;
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
  int64_t rows() const { return cols() ? elements() / cols() : 0; }
};

// One .safetensors file, header parsed and validated at construction (FormatError naming the
// file and the tensor otherwise). Reads are positional and thread-safe.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  // A shard that is gone (reclaimed) described by its saved header: listing works, reads fail.
  SafetensorsFile(const std::filesystem::path& path, uint64_t file_size, const std::string& json);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  uint64_t file_size() const { return size_; }
  const std::map<std::string, TensorInfo, std::less<>>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  const std::string& header_json() const { return json_; }
  // Bytes [off, off + n) of tensor t's data.
  void read(const TensorInfo& t, uint64_t off, uint64_t n, void* dst) const;

 private:
  void parse_header(const std::string& json);

  std::filesystem::path path_;
  std::string json_;
  int fd_ = -1;
  uint64_t size_ = 0, data_start_ = 0;
  std::map<std::string, TensorInfo, std::less<>> tensors_;
};

// How a weight is stored: plainly (BF16, F16, F32), as an MXFP4 pair (`name`_packed U8 +
// `name`_scale U8), as F8_E4M3 with `name`_scale_inv per tile, or as pack-quantized int4
// (`name`_packed I32 + `name`_scale per group + `name`_shape).
enum class Stored { kPlain, kMxfp4, kFp8, kInt4 };

// A checkpoint folder: config.json plus either model.safetensors.index.json and its shards, or
// one model.safetensors. Shards are opened on first use. A DeepSeek-V3 / Kimi K2 release names
// its MoE tensors under `mlp.` (experts as gate_proj/up_proj/down_proj); such a checkpoint lists
// them under the engine's names (`block_sparse_moe.`, experts as w1/w3/w2) and reads them from
// the release's (docs/CONVERTER.md §1.2).
class Checkpoint {
 public:
  // With `header_cache`, every shard header read is saved there, and a shard that has since
  // been deleted (--reclaim) is described from its saved header.
  explicit Checkpoint(const std::filesystem::path& dir,
                      const std::filesystem::path& header_cache = {});

  const std::filesystem::path& dir() const { return dir_; }
  // Tensor name -> shard file name, as the index lists it (under the engine's names).
  const std::map<std::string, std::string, std::less<>>& weight_map() const { return map_; }
  // Every shard the index names, sorted.
  std::vector<std::string> shards() const;
  const std::string& shard_of(std::string_view tensor) const;
  // Every shard a read of the tensor touches (its companions' included).
  std::set<std::string> shards_of(std::string_view tensor);
  // The release's own name of a tensor (differs from `name` on DeepSeek-named checkpoints).
  std::string source_name(std::string_view name) const;
  const WeightQuant& quant() const { return quant_; }

  // A tensor is stored plainly or as one of the pairs of `Stored`.
  bool has(std::string_view name) const;
  bool is_mxfp4(std::string_view name) { return stored(name) == Stored::kMxfp4; }
  Stored stored(std::string_view name);
  // True for the companions (scales, packed halves, shapes) that are read with their weight.
  static bool is_companion(std::string_view name);
  // Shape of the logical tensor, its storage checked against the config (fp8 tile, int4
  // group) from the headers alone.
  std::vector<int64_t> shape(std::string_view name);
  // Rows [r0, r1) of the tensor seen as rows x last dim, decoded to f32. Throws FormatError
  // naming the shard and tensor on any inconsistency.
  void read_rows(std::string_view name, int64_t r0, int64_t r1, float* out);
  // Elements [first, first + n) in row-major order, as f32 (a quantized tensor: whole rows).
  void read_elements(std::string_view name, int64_t first, int64_t n, float* out);
  // The whole tensor as f32 into *out (resized; a caller reading many tensors keeps one vector,
  // so each read reuses its pages instead of faulting in fresh zeroed ones); rows/cols as in
  // read_rows.
  void read_all(std::string_view name, std::vector<float>* out, int64_t* rows, int64_t* cols);

  // The shard's parsed header (opened once; thread-safe).
  const SafetensorsFile& shard(const std::string& file);
  // The header entry of a stored tensor, checked to be in the shard the index names.
  const TensorInfo& info(std::string_view name);

 private:
  void adopt_engine_names();
  std::string where(std::string_view name);
  void read_fp8_rows(const std::string& name, int64_t r0, int64_t r1, float* out);
  void read_int4_rows(const std::string& name, int64_t r0, int64_t r1, float* out);
  void check_int4_shape(const std::string& name, const std::vector<int64_t>& shape);

  std::filesystem::path dir_, cache_;
  WeightQuant quant_;
  std::map<std::string, std::string, std::less<>> map_;
  std::map<std::string, std::string, std::less<>> source_;  // engine name -> release name
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;
};

// Widens n stored values of `d` (BF16, F16 or F32) to f32; `what` names the tensor otherwise.
void widen_to_f32(Dtype d, const void* src, int64_t n, float* out, const std::string& what);

}  // namespace waste
