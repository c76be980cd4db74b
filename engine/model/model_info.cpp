#include "engine/model/model_info.h"

#include <filesystem>

#include "engine/base/error.h"

namespace waste {

namespace fs = std::filesystem;

ModelSummary summarize(const Container& c, int64_t ctx, int threads) {
  const Manifest& m = c.manifest();
  const ModelConfig& cfg = m.config;
  ModelSummary s;
  s.arch = m.arch;
  s.architecture = cfg.architecture;
  s.family = cfg.arch() == Arch::kK3           ? "k3"
             : cfg.arch() == Arch::kDeepSeekV3 ? "deepseek-v3"
                                               : "kimi-linear";
  s.n_kda = cfg.n_kda_layers();
  s.n_mla = cfg.n_mla_layers();
  s.n_moe = (int)m.banks.size();
  int64_t trunk = 0, embed = 0;
  for (const TrunkEntry& t : m.trunk) {
    s.trunk_formats[format_name(t.fmt)]++;
    if (t.name.compare(0, m.tensor_prefix.size(), m.tensor_prefix) != 0) continue;
    trunk += t.elements();
    if (t.name == m.tensor_prefix + "model.embed_tokens.weight") embed = t.elements();
  }
  int64_t per_expert = 3 * (int64_t)cfg.moe_inter * cfg.expert_in();
  s.params_total = trunk + per_expert * cfg.n_experts * s.n_moe;
  s.params_active = trunk - embed + cfg.hidden + per_expert * cfg.top_k * s.n_moe;
  if (cfg.n_experts > 0)
    s.expert_format = fmt::format("{} ({} stages x {} entries, {}-dim vectors)",
                                  m.quant.fmt.empty() ? "VQ" : m.quant.fmt, m.quant.stages,
                                  m.quant.entries, m.quant.vec_dim);
  for (const auto& e : fs::directory_iterator(c.dir())) {
    if (!e.is_regular_file()) continue;
    s.file_bytes[e.path().filename().string()] = e.file_size();
    s.container_bytes += e.file_size();
  }
  s.plan = plan_memory(m, ctx, threads);
  return s;
}

std::vector<std::string> verify_records(const Container& c, void (*progress)(int, void*),
                                        void* arg) {
  std::vector<std::string> problems;
  for (const auto& [layer, entry] : c.manifest().banks) {
    const ExpertBank& bank = c.bank(layer);
    AlignedBuffer buf(bank.stride());
    for (int e = 0; e < entry.experts; e++) {
      try {
        bank.read(e, buf.data());
      } catch (const std::exception& ex) {
        problems.push_back(fmt::format("{}: layer {}, expert {}, byte offset {}: {}", entry.file,
                                       layer, e, (uint64_t)e * bank.stride(), ex.what()));
      }
    }
    if (progress) progress(layer, arg);
  }
  return problems;
}

}  // namespace waste
