// `waste run` (generate a continuation) and `waste eval` (logits of the last prompt position).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "engine/atomic_file.h"
#include "engine/sampler.h"
#include "engine/stopwatch.h"
#include "protocol/json_writer.h"
#include "server/cli_commands.h"
#include "server/cli_images.h"
#include "server/cli_model.h"

namespace waste::cli {

namespace {

void write_stats(JsonWriter& w, const LoadedModel& m, size_t prompt, size_t generated,
                 double prefill_s, double decode_s) {
  const ExpertStats st = m.model->expert_stats();
  const LookaheadStats& la = m.model->lookahead_stats();
  w.key("stats").begin_object();
  w.key("prompt_tokens").value((int64_t)prompt).key("generated_tokens").value((int64_t)generated);
  w.key("prefill_seconds").value(prefill_s).key("decode_seconds").value(decode_s);
  w.key("prefill_tokens_per_second").value(prefill_s > 0 ? prompt / prefill_s : 0.0);
  w.key("decode_tokens_per_second").value(decode_s > 0 ? generated / decode_s : 0.0);
  w.key("threads").value(m.model->threads());
  w.key("expert_cache").begin_object();
  w.key("hits").value(st.hits).key("misses").value(st.misses);
  w.key("bytes_read").value(st.bytes_read).key("read_seconds").value(st.read_seconds);
  w.key("wait_seconds").value(st.wait_seconds).key("prefetched").value(st.prefetched);
  w.key("slots").value((int64_t)m.budget.cache_bytes /
                       (int64_t)std::max<uint64_t>(m.plan.record_bytes, 1));
  w.end_object();
  w.key("lookahead").begin_object();
  w.key("predicted").value(la.predicted).key("correct").value(la.correct);
  w.key("accuracy").value(la.predicted ? (double)la.correct / la.predicted : 0.0);
  w.end_object().end_object();
}

SamplerParams sampler_params(const Args& a) {
  SamplerParams p;
  p.temperature = std::stof(a.get_or("--temp", "0"));
  if (auto s = a.get("--seed")) p.seed = (uint64_t)a.get_int("--seed", 0, 0, INT64_MAX);
  p.top_k = (int)a.get_int("--top-k", 0, 0, 1 << 24);
  p.top_p = std::stof(a.get_or("--top-p", "1"));
  return p;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  std::set<std::string> valued = kModelValuedFlags;
  valued.insert({"-n", "--temp", "--seed", "--top-k", "--top-p", "--image"});
  Args a(argc, argv, 2, valued, {"--json", "--verify"});
  if (a.positional().empty()) throw UsageFailure{"expected MODEL"};
  int64_t n = a.get_int("-n", 16, 0, 1 << 20);
  SamplerParams sp;
  try {
    sp = sampler_params(a);
  } catch (const std::invalid_argument&) {
    throw UsageFailure{"--temp and --top-p take numbers"};
  }
  LoadedModel m = load_model(a.positional()[0], a);
  std::vector<int32_t> prompt = prompt_ids(m, a);
  std::unique_ptr<ImageEncoder> enc;
  auto images = images_from_args(m, a, enc, prompt);
  Sampler sampler(sp, m.model->config().vocab);
  Session s = m.model->new_session(m.plan.ctx);
  std::vector<float> logits(m.model->config().vocab);

  auto t0 = SteadyClock::now();
  forward_prompt(*m.model, s, prompt, 0, images.get(), logits.data());
  double prefill_s = seconds_since(t0);
  std::vector<int32_t> out;
  std::unique_ptr<StreamDecoder> dec;
  if (m.tokenizer && !a.has("--json")) dec = std::make_unique<StreamDecoder>(*m.tokenizer);
  int64_t eos = m.model->config().eos_token_id;
  t0 = SteadyClock::now();
  while ((int64_t)out.size() < n) {
    int id = sampler.sample(logits, out);
    out.push_back(id);
    if (dec) {
      fmt::print("{}", dec->push(id));
      std::fflush(stdout);
    } else if (!a.has("--json")) {
      fmt::print("{}{}", out.size() > 1 ? " " : "", id);
    }
    if ((eos > 0 && id == eos) || (int64_t)out.size() == n || s.room() == 0) break;
    m.model->forward(s, std::span<const int32_t>(&out.back(), 1), logits.data());
  }
  double decode_s = seconds_since(t0);
  if (a.has("--json")) {
    JsonWriter w;
    w.begin_object().key("token_ids").begin_array();
    for (int32_t id : out) w.value((int64_t)id);
    w.end_array().key("text").value(decode_text(m, out));
    w.key("seed").value(sampler.seed());
    write_stats(w, m, prompt.size(), out.size(), prefill_s, decode_s);
    fmt::print("{}\n", w.end_object().str());
  } else {
    if (dec) fmt::print("{}", dec->flush());
    fmt::print("\n");
  }
  return 0;
}

int cmd_eval(int argc, char** argv) {
  std::set<std::string> valued = kModelValuedFlags;
  valued.insert({"--top-k", "--dump-logits", "--image"});
  Args a(argc, argv, 2, valued, {"--json", "--verify"});
  if (a.positional().empty()) throw UsageFailure{"expected MODEL"};
  int64_t k = a.get_int("--top-k", 10, 1, 1 << 24);
  LoadedModel m = load_model(a.positional()[0], a);
  std::vector<int32_t> prompt = prompt_ids(m, a);
  std::unique_ptr<ImageEncoder> enc;
  auto images = images_from_args(m, a, enc, prompt);
  int vocab = m.model->config().vocab;
  Session s = m.model->new_session(m.plan.ctx);
  std::vector<float> logits(vocab);
  auto t0 = SteadyClock::now();
  forward_prompt(*m.model, s, prompt, 0, images.get(), logits.data());
  double prefill_s = seconds_since(t0);
  if (auto path = a.get("--dump-logits"))
    write_file_atomic(*path, std::string_view((const char*)logits.data(), logits.size() * 4));

  std::vector<int> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  k = std::min<int64_t>(k, vocab);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int x, int y) {
    return logits[x] > logits[y] || (logits[x] == logits[y] && x < y);
  });
  double mx = logits[order[0]], z = 0;
  for (float l : logits) z += std::exp((double)l - mx);
  if (a.has("--json")) {
    JsonWriter w;
    w.begin_object().key("top").begin_array();
    for (int64_t i = 0; i < k; i++)
      w.begin_object()
          .key("id")
          .value(order[i])
          .key("logit")
          .value((double)logits[order[i]])
          .key("prob")
          .value(std::exp(logits[order[i]] - mx) / z)
          .end_object();
    w.end_array();
    write_stats(w, m, prompt.size(), 0, prefill_s, 0);
    fmt::print("{}\n", w.end_object().str());
    return 0;
  }
  for (int64_t i = 0; i < k; i++) {
    std::string text = m.tokenizer ? decode_text(m, {order[i]}) : "";
    fmt::print("{:>8} {:>12.6f} {:>9.6f} {:?}\n", order[i], logits[order[i]],
               std::exp(logits[order[i]] - mx) / z, text);
  }
  return 0;
}

}  // namespace waste::cli
