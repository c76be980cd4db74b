// The sampler. The vocabulary is large (163,840 for Kimi), so no step sorts it: the passes over
// every id are flat vector loops, and top-k / top-p / min-p narrow the ids to a candidate list
// before anything is ordered.
#include "engine/model/sampler.h"

#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "engine/base/error.h"
#include "engine/kernels/kernels.h"
#include "engine/model/sampler_lanes.h"

namespace waste {

namespace {

// top_k up to this scans with a bounded heap and continues on the survivors alone; larger k cuts
// the dense array at the k-th best of the candidates above an estimated floor.
constexpr int kHeapTopK = 400;
// Weights are bucketed by their float bits for top-p: 16 buckets per octave, monotone in the
// weight, so a bucket boundary never splits equal weights. Bucket 0 holds weight 1.
constexpr int kBucketShift = 19;
constexpr int kBucketCount = (0x3F800000 >> kBucketShift) + 1;
constexpr int kSubBuckets = 1 << (kBucketShift - 9);
// A top-p edge bucket with more ids than this is split once more before sorting.
constexpr size_t kSortDirectly = 64;
// The top-p and top-k floor estimates read every kSampleStride-th id; top-p's stays kSlackBuckets
// (two octaves) below where the sample's mass reaches top_p, so the exact check rarely fails.
constexpr int kSampleStride = 16;
constexpr int kSlackBuckets = 32;

// Follows the engine's choice (WASTE_ISA can lower it).
const SamplerKernels* choose_kernels() {
  const SamplerKernels* wide = detect_isa() == Isa::kScalar ? nullptr : vector_sampler_kernels();
  return wide ? wide : &baseline_sampler_kernels();
}

int bucket_of(float w) {
  int b = (0x3F800000 - std::bit_cast<int32_t>(w)) >> kBucketShift;
  return b < 0 ? 0 : b;
}

// Within a bucket, 1024 finer ones by the next bits; lower again means a higher weight.
int sub_bucket_of(float w) {
  return ((0x3F800000 - std::bit_cast<int32_t>(w)) & ((1 << kBucketShift) - 1)) >> 9;
}

// The smallest positive weight in bucket b, or 0 past the last bucket.
float bucket_floor(int b) {
  int32_t bits = 0x3F800000 - ((b + 1) << kBucketShift) + 1;
  return bits > 0 ? std::bit_cast<float>(bits) : 0.0f;
}

bool any_allowed(const uint8_t* mask, int vocab) {
  uint8_t any = 0;
  for (int b = 0; b < vocab / 8; b++) any |= mask[b];
  if (vocab % 8) any |= mask[vocab / 8] & ((1u << (vocab % 8)) - 1);
  return any != 0;
}

bool in_range(float x, float lo, float hi) {
  return x >= lo && x <= hi;
}

SamplerParams validated(SamplerParams p, int vocab) {
  validate(p, vocab);
  return p;
}

}  // namespace

const SamplerKernels& baseline_sampler_kernels() {
  static constexpr SamplerKernels kBaseline = sampler_table<4>();
  return kBaseline;
}

uint64_t random_seed() {
  std::random_device rd;
  return (uint64_t)rd() << 32 | rd();
}

uint64_t reply_seed(std::optional<uint64_t> requested, std::optional<uint64_t> fallback) {
  if (requested) return *requested;
  return fallback ? *fallback : random_seed();
}

void validate(const SamplerParams& p, int vocab) {
  if (vocab <= 0) fail<UsageError>("sampler vocab must be positive (got {})", vocab);
  if (!(p.temperature >= 0 && std::isfinite(p.temperature)))
    fail<UsageError>("temperature must be a finite number >= 0 (got {})", p.temperature);
  if (p.top_k < 0) fail<UsageError>("top_k must be >= 0, 0 meaning off (got {})", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1)) fail<UsageError>("top_p must be in (0, 1] (got {})", p.top_p);
  if (!in_range(p.min_p, 0, 1)) fail<UsageError>("min_p must be in [0, 1] (got {})", p.min_p);
  if (!(p.repetition_penalty > 0 && std::isfinite(p.repetition_penalty)))
    fail<UsageError>("repetition_penalty must be a finite number > 0 (got {})",
                     p.repetition_penalty);
  if (!in_range(p.presence_penalty, -2, 2))
    fail<UsageError>("presence_penalty must be in [-2, 2] (got {})", p.presence_penalty);
  if (!in_range(p.frequency_penalty, -2, 2))
    fail<UsageError>("frequency_penalty must be in [-2, 2] (got {})", p.frequency_penalty);
  if (p.logprobs < -1 || p.logprobs > 20)
    fail<UsageError>("top_logprobs must be in [0, 20] (got {})", p.logprobs);
  for (auto [id, bias] : p.logit_bias) {
    if (id < 0 || id >= vocab)
      fail<UsageError>("logit_bias: token id {} is outside the vocabulary [0, {})", id, vocab);
    if (!in_range(bias, -100, 100))
      fail<UsageError>("logit_bias: bias {} for token {} is outside [-100, 100]", bias, id);
  }
}

Sampler::Sampler(SamplerParams p, int vocab)
    : p_(validated(std::move(p), vocab)),
      vocab_(vocab),
      seed_(reply_seed(p_.seed)),
      rng_(seed_),
      k_(choose_kernels()) {
  size_t padded = (size_t)(vocab + kBlock - 1) / kBlock * kBlock;
  logit_.assign(padded, kNegInf);
  weight_.assign(padded, 0.0f);
  block_sum_.assign(padded / kBlock, 0.0);
  if (p_.repetition_penalty != 1 || p_.presence_penalty != 0 || p_.frequency_penalty != 0)
    count_.assign(vocab, 0);
  if (p_.top_p < 1 || p_.min_p > 0 || p_.top_k > kHeapTopK) cand_.resize(padded);
  if (p_.top_p < 1) bucket_mass_.assign(kBucketCount, 0.0);
}

int Sampler::sample(std::span<const float> logits, std::span<const int32_t> history,
                    const uint8_t* allowed_mask) {
  Cand best = prepare(logits, history, allowed_mask);
  if (best.first == kNegInf)
    fail<UsageError>("no allowed token has a finite logit (every one is NaN or -inf)");
  if (p_.logprobs < 0) return draw(best);
  report_logit_.assign(logit_.begin(), logit_.begin() + vocab_);
  int id = draw(best);
  report(id, best.first);
  return id;
}

const TokenLogprobs& Sampler::score(std::span<const float> logits, std::span<const int32_t> history,
                                    int id) {
  if (id < 0 || id >= vocab_) fail<UsageError>("token id {} is outside the vocabulary", id);
  Cand best = prepare(logits, history, nullptr);
  if (best.first == kNegInf)
    fail<UsageError>("no token has a finite logit (every one is NaN or -inf)");
  report_logit_.assign(logit_.begin(), logit_.begin() + vocab_);
  report(id, best.first);
  return report_;
}

int Sampler::draw(Cand best) {
  auto [max_logit, argmax] = best;
  if (p_.temperature == 0) return argmax;
  // Past FLT_MAX the scale only sends non-maximal logits to -inf, which it would anyway.
  float inv_t = (float)std::min(1.0 / p_.temperature, (double)FLT_MAX);
  if (p_.top_k > 0 && p_.top_k < vocab_) {
    if (p_.top_k <= kHeapTopK) return sample_top_k(max_logit, inv_t);
    cut_to_top_k();
  }
  double total = k_->weights(logit_.data(), weight_.data(), block_sum_.data(), block_sum_.size(),
                             max_logit, inv_t);
  if (p_.top_p == 1 && p_.min_p == 0) return draw_dense(total);
  return draw_from(collect_candidates(total, argmax), total);
}

// In double throughout, so the log-normalizer does not depend on the vector path. The top list
// orders by logit then id, which is the probability order.
void Sampler::report(int id, float max_logit) {
  const double inv_t = p_.temperature > 0 ? 1.0 / p_.temperature : 1.0;
  double sum = 0;
  for (float x : report_logit_)
    if (x != kNegInf) sum += std::exp(((double)x - max_logit) * inv_t);
  const double log_z = std::log(sum);
  auto logprob = [&](int i) {
    return (float)(((double)report_logit_[i] - max_logit) * inv_t - log_z);
  };
  report_.id = id;
  report_.logprob = logprob(id);
  report_.top.clear();
  heap_.clear();
  const size_t n = (size_t)std::max(0, p_.logprobs);
  for (int i = 0; i < vocab_ && n > 0; i++) {
    if (report_logit_[i] == kNegInf) continue;
    Cand c{report_logit_[i], i};
    if (heap_.size() < n) {
      heap_.push_back(c);
      std::push_heap(heap_.begin(), heap_.end(), better);
    } else if (better(c, heap_.front())) {
      std::pop_heap(heap_.begin(), heap_.end(), better);
      heap_.back() = c;
      std::push_heap(heap_.begin(), heap_.end(), better);
    }
  }
  std::sort_heap(heap_.begin(), heap_.end(), better);
  for (const Cand& c : heap_) report_.top.push_back({c.second, logprob(c.second)});
}

// Returns the best (logit, id) after everything up to the mask. The mask is applied while
// copying: a disallowed id is -inf, and -inf stays -inf through bias and penalties, so this equals
// applying it after them. The copy also finds the maximum; the few ids that bias and penalties
// change update it, and a lowered maximum means one more pass to find the new one.
std::pair<float, int> Sampler::prepare(std::span<const float> logits,
                                       std::span<const int32_t> history,
                                       const uint8_t* allowed_mask) {
  if (logits.size() != (size_t)vocab_)
    fail<UsageError>("logits: expected {} values (the vocabulary), got {}", vocab_, logits.size());
  if (allowed_mask && !any_allowed(allowed_mask, vocab_))
    fail<UsageError>("constraint left no allowed token");
  best_ = k_->load(logits.data(), logit_.data(), vocab_, allowed_mask);
  best_stale_ = false;
  for (auto [id, bias] : p_.logit_bias) set_logit(id, logit_[id] + bias);
  if (!count_.empty()) apply_penalties(history);
  if (best_stale_) best_ = k_->find_max(logit_.data(), logit_.size());
  return best_;
}

// Bias and penalties can push the largest float past it; keep max-subtraction finite.
void Sampler::set_logit(int id, float x) {
  x = x > FLT_MAX ? FLT_MAX : x;
  if (id == best_.second && x < best_.first) best_stale_ = true;
  logit_[id] = x;
  if (!best_stale_ && (id == best_.second || better({x, id}, best_))) best_ = {x, id};
}

// Counts only the ids that occur (count_ stays all-zero between calls), so the cost follows the
// history length, not the vocabulary.
void Sampler::apply_penalties(std::span<const int32_t> history) {
  seen_.clear();
  for (size_t i = 0; i < history.size(); i++) {
    int32_t id = history[i];
    if (id < 0 || id >= vocab_) {
      for (int32_t s : seen_) count_[s] = 0;
      fail<UsageError>("history: token {} at position {} is outside the vocabulary [0, {})", id, i,
                       vocab_);
    }
    if (count_[id]++ == 0) seen_.push_back(id);
  }
  float rp = p_.repetition_penalty;
  for (int32_t id : seen_) {
    float l = logit_[id];
    if (rp != 1) l = l > 0 ? l / rp : l * rp;
    set_logit(id, l - ((float)count_[id] * p_.frequency_penalty + p_.presence_penalty));
    count_[id] = 0;
  }
}

// Small k: only the survivors go on. Their weights come from the same kernel as the dense path
// (logit_ is free to reuse as its input), so a survivor's weight is the same bits either way.
int Sampler::sample_top_k(float max_logit, float inv_t) {
  heap_.resize(p_.top_k);
  heap_.resize(k_->top_k(logit_.data(), logit_.size(), p_.top_k, heap_.data()));
  size_t blocks = (heap_.size() + kBlock - 1) / kBlock;
  std::fill(logit_.begin(), logit_.begin() + blocks * kBlock, kNegInf);
  for (size_t j = 0; j < heap_.size(); j++) logit_[j] = heap_[j].first;
  double total =
      k_->weights(logit_.data(), weight_.data(), block_sum_.data(), blocks, max_logit, inv_t);
  for (size_t j = 0; j < heap_.size(); j++) heap_[j].first = weight_[j];
  return draw_from(heap_, total);
}

// Large k: the logits above a floor estimated from a sample (every finite one when the estimate
// falls short), then the k-th best of those by nth_element; every worse id goes to -inf and the
// dense path continues.
void Sampler::cut_to_top_k() {
  size_t k = p_.top_k;
  auto collect_logits = [&](float least) {
    return std::span<Cand>(cand_.data(),
                           k_->collect(logit_.data(), logit_.size(), least, cand_.data()));
  };
  std::span<Cand> c = collect_logits(top_k_floor(k));
  if (c.size() < k) c = collect_logits(-FLT_MAX);
  if (c.size() <= k) return;  // no more finite logits than k
  std::nth_element(c.begin(), c.begin() + (k - 1), c.end(), better);
  k_->cut(logit_.data(), logit_.size(), c[k - 1].first, c[k - 1].second, kNegInf);
}

// A logit about 1.5 k logits reach, judged from every kSampleStride-th one.
float Sampler::top_k_floor(size_t k) {
  values_.clear();
  for (int i = 0; i < vocab_; i += kSampleStride)
    if (logit_[i] != kNegInf) values_.push_back(logit_[i]);
  size_t rank = std::min(values_.size(), (k + k / 2) / kSampleStride + 8);
  if (rank == 0) return -FLT_MAX;
  std::nth_element(values_.begin(), values_.begin() + (rank - 1), values_.end(), std::greater<>());
  return values_[rank - 1];
}

// The ids that top-p or min-p can keep, with their weights. Min-p keeps weight >= min_p (the top
// weight is exactly 1). Top-p's prefix lies above an estimated floor; the exact mass of what was
// collected checks that, and a failed check retries 8 octaves lower, then takes every id.
std::span<Cand> Sampler::collect_candidates(double total, int argmax) {
  if (p_.top_p == 1) return collect(p_.min_p);
  float least = top_p_floor(argmax);
  for (float retry : {1.0f, 0x1p-8f}) {
    std::span<Cand> c = collect(least * retry);
    double mass = 0;
    for (const Cand& x : c) mass += x.first;
    if (mass >= p_.top_p * total) return c;
  }
  return collect(0);
}

// (w, id) for every positive w >= least, in id order.
std::span<Cand> Sampler::collect(float least) {
  float t = std::max(least, FLT_TRUE_MIN);
  return {cand_.data(), k_->collect(weight_.data(), weight_.size(), t, cand_.data())};
}

// From every kSampleStride-th weight plus the top one (exactly 1, at argmax): the bucket where
// the sample's running mass reaches top_p of the sample's mass, lowered by kSlackBuckets. Mass
// concentrated in ids the sample misses only lowers the estimate, which costs time, not results.
float Sampler::top_p_floor(int argmax) {
  std::fill(bucket_mass_.begin(), bucket_mass_.end(), 0.0);
  double sampled = 1.0;
  for (int i = 0; i < vocab_; i += kSampleStride) {
    if (i == argmax) continue;
    bucket_mass_[bucket_of(weight_[i])] += (double)weight_[i] * kSampleStride;
    sampled += (double)weight_[i] * kSampleStride;
  }
  bucket_mass_[0] += 1.0;
  double target = p_.top_p * sampled, mass = 0;
  for (int b = 0; b < kBucketCount; b++)
    if ((mass += bucket_mass_[b]) >= target) return bucket_floor(b + kSlackBuckets);
  return 0.0f;
}

// The last candidate top-p keeps, in descending (weight, id) order, or none when the candidates'
// mass falls short of target by rounding (then all stay). The first bucket (highest weights
// first) whose running mass reaches target holds it; a crowded bucket is split once more by the
// next bits, and only what remains is sorted. Equal weights are usually already in id order
// (candidates come in id order), which is_sorted notices, so even a flat distribution costs
// linear time.
std::optional<Cand> Sampler::top_p_cut(std::span<const Cand> cands, double target) {
  double mass = 0;
  int b = first_bucket_reaching(cands, bucket_of, kBucketCount, target, mass);
  if (b < 0) return std::nullopt;
  edge_.clear();
  for (const Cand& c : cands)
    if (bucket_of(c.first) == b) edge_.push_back(c);
  if (edge_.size() > kSortDirectly) {
    int sub = first_bucket_reaching(edge_, sub_bucket_of, kSubBuckets, target, mass);
    if (sub < 0) return *std::max_element(edge_.begin(), edge_.end(), better);  // the worst
    std::erase_if(edge_, [sub](const Cand& c) { return sub_bucket_of(c.first) != sub; });
  }
  if (!std::is_sorted(edge_.begin(), edge_.end(), better))
    std::sort(edge_.begin(), edge_.end(), better);
  for (const Cand& c : edge_)
    if ((mass += c.first) >= target) return c;
  return edge_.back();
}

// Adds to `mass` the mass of the buckets (under `key`, lower first) before the first one where it
// would reach target, and returns that bucket; -1 when none does.
template <class Key>
int Sampler::first_bucket_reaching(std::span<const Cand> cands, Key key, int buckets, double target,
                                   double& mass) {
  std::fill_n(bucket_mass_.begin(), buckets, 0.0);
  for (const Cand& c : cands) bucket_mass_[key(c.first)] += c.first;
  for (int b = 0; b < buckets; b++) {
    if (mass + bucket_mass_[b] >= target) return b;
    mass += bucket_mass_[b];
  }
  return -1;
}

// Applies top-p (a fraction of `total`, the mass of every id still in play) and min-p to the
// candidates, then one uniform draw over the survivors in list order.
int Sampler::draw_from(std::span<Cand> cands, double total) {
  std::optional<Cand> cut;
  if (p_.top_p < 1) cut = top_p_cut(cands, p_.top_p * total);
  auto kept = [&](const Cand& c) {
    return c.first > 0 && c.first >= p_.min_p && !(cut && better(*cut, c));
  };
  double mass = 0;
  for (const Cand& c : cands)
    if (kept(c)) mass += c.first;
  double u = rng_.uniform() * mass;
  int pick = -1;
  for (const Cand& c : cands) {
    if (!kept(c)) continue;
    pick = c.second;
    if (u < c.first) break;
    u -= c.first;
  }
  return pick;
}

// One uniform draw against the cumulative weights: find the block, then the id within it. The
// fallbacks only matter when rounding leaves the draw past the last positive weight.
int Sampler::draw_dense(double total) {
  double u = rng_.uniform() * total;
  size_t b = 0, last_positive = 0;
  for (; b < block_sum_.size(); b++) {
    if (block_sum_[b] > 0) last_positive = b;
    if (u < block_sum_[b]) break;
    u -= block_sum_[b];
  }
  if (b == block_sum_.size()) b = last_positive;
  int first = (int)b * kBlock, pick = -1;
  for (int i = first; i < first + kBlock; i++) {
    if (weight_[i] <= 0) continue;
    pick = i;
    if (u < weight_[i]) break;
    u -= weight_[i];
  }
  return pick;
}

}  // namespace waste
