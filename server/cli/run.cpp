// `waste run` (generate a continuation) and `waste eval` (logits of the last prompt position),
// both through the Decoder the daemon uses, so a continuation ends where a daemon reply would.
#include <algorithm>
#include <cmath>
#include <numeric>

#include <fmt/format.h>

#include "engine/base/atomic_file.h"
#include "engine/model/sampler.h"
#include "protocol/json/json_writer.h"
#include "server/cli/commands.h"
#include "server/cli/images.h"
#include "server/cli/model_args.h"
#include "server/runtime/decoder.h"

namespace waste::cli {

namespace {

void write_stats(JsonWriter& w, const ModelHost& m, size_t prompt, size_t generated,
                 double prefill_s, double decode_s) {
  const ExpertStats st = m.model().expert_stats();
  const LookaheadStats& la = m.model().lookahead_stats();
  w.key("stats").begin_object();
  w.key("prompt_tokens").value((int64_t)prompt).key("generated_tokens").value((int64_t)generated);
  w.key("prefill_seconds").value(prefill_s).key("decode_seconds").value(decode_s);
  w.key("prefill_tokens_per_second").value(prefill_s > 0 ? prompt / prefill_s : 0.0);
  w.key("decode_tokens_per_second").value(decode_s > 0 ? generated / decode_s : 0.0);
  w.key("threads").value(m.model().threads());
  w.key("expert_cache").begin_object();
  w.key("hits").value(st.hits).key("misses").value(st.misses);
  w.key("bytes_read").value(st.bytes_read).key("read_seconds").value(st.read_seconds);
  w.key("wait_seconds").value(st.wait_seconds).key("prefetched").value(st.prefetched);
  w.key("slots").value((int64_t)m.budget().cache_bytes /
                       (int64_t)std::max<uint64_t>(m.plan().record_bytes, 1));
  w.end_object();
  const KernelClock& kc = m.model().kernel_clock();
  w.key("kernel_seconds").begin_object();
  w.key("trunk").value(kc.trunk).key("experts").value(kc.experts).end_object();
  w.key("lookahead").begin_object();
  w.key("predicted").value(la.predicted).key("correct").value(la.correct);
  w.key("accuracy").value(la.predicted ? (double)la.correct / la.predicted : 0.0);
  w.end_object().end_object();
}

SamplerParams sampler_params(const Args& a) {
  SamplerParams p;
  p.temperature = (float)a.get_number("--temp", 0, 0, 100);
  p.top_p = (float)a.get_number("--top-p", 1, 0, 1);
  if (a.has("--seed")) p.seed = (uint64_t)a.get_int("--seed", 0, 0, INT64_MAX);
  p.top_k = (int)a.get_int("--top-k", 0, 0, 1 << 24);
  return p;
}

// The continuation as it is generated: printed (its text, or its ids without a tokenizer), or
// with --json only kept, for the whole result printed at the end.
class RunSink final : public ReplySink {
 public:
  RunSink(bool print, bool ids) : print_(print), ids_(ids) {}
  void on_token(int32_t id, const TokenLogprobs*) override {
    if (!print_ || !ids_) return;
    fmt::print("{}{}", first_ ? "" : " ", id);
    first_ = false;
  }
  void on_event(const ReplyEvent& e) override {
    text += e.text;
    if (!print_ || ids_ || e.text.empty()) return;
    fmt::print("{}", e.text);
    std::fflush(stdout);
  }
  std::string text;  // whole UTF-8 characters, end tokens left out

 private:
  bool print_, ids_;
  bool first_ = true;
};

class SilentSink final : public ReplySink {
 public:
  void on_event(const ReplyEvent&) override {}
};

// The prompt (with any --image blocks before it) as a Decoder input.
DecodeInput prompt_input(const ModelHost& m, const Args& a, std::unique_ptr<ImageEncoder>& enc) {
  DecodeInput in;
  in.prompt = prompt_ids(m, a);
  in.images = images_from_args(m, a, enc, in.prompt);
  in.end_ids = end_ids(m);
  return in;
}

}  // namespace

int cmd_run(int argc, char** argv) {
  Args a(argc, argv, 2,
         model_valued_flags({"-n", "--temp", "--seed", "--top-k", "--top-p", "--image"}),
         model_boolean_flags({"--json"}));
  if (a.positional().empty()) throw UsageFailure{"expected MODEL"};
  int64_t n = a.get_int("-n", 16, 0, 1 << 20);
  SamplerParams sp = sampler_params(a);
  auto m = open_model(a.positional()[0], a);
  std::unique_ptr<ImageEncoder> enc;
  DecodeInput in = prompt_input(*m, a, enc);
  in.sampler = sp;
  in.max_new = n;
  const bool json = a.has("--json");
  // What the model writes, special tokens included, up to an end token: as a daemon completion.
  std::unique_ptr<ReplyParser> parser;
  if (m->tokenizer()) parser = std::make_unique<TextReplyParser>(*m->tokenizer(), in.end_ids, true);
  RunSink out(!json, !m->tokenizer());
  Session s = m->model().new_session(m->ctx());
  Decoder decoder(m->model(), nullptr);
  const size_t prompt_tokens = in.prompt.size();
  DecodeResult r = decoder.run(s, in, parser.get(), out);
  if (json) {
    JsonWriter w;
    w.begin_object();
    write_token_ids(w, r.tokens);
    w.key("text").value(out.text);
    w.key("seed").value(r.seed);
    write_stats(w, *m, prompt_tokens, r.tokens.size(), r.prefill_seconds, r.decode_seconds);
    fmt::print("{}\n", w.end_object().str());
  } else {
    fmt::print("\n");
  }
  return 0;
}

int cmd_eval(int argc, char** argv) {
  Args a(argc, argv, 2, model_valued_flags({"--top-k", "--dump-logits", "--image"}),
         model_boolean_flags({"--json"}));
  if (a.positional().empty()) throw UsageFailure{"expected MODEL"};
  int64_t k = a.get_int("--top-k", 10, 1, 1 << 24);
  auto m = open_model(a.positional()[0], a);
  std::unique_ptr<ImageEncoder> enc;
  DecodeInput in = prompt_input(*m, a, enc);
  in.max_new = 0;  // the prompt's logits only
  const size_t prompt_tokens = in.prompt.size();
  Session s = m->model().new_session(m->ctx());
  Decoder decoder(m->model(), nullptr);
  SilentSink silent;
  DecodeResult r = decoder.run(s, in, nullptr, silent);
  const std::vector<float>& logits = decoder.logits();
  const int vocab = (int)logits.size();
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
    write_stats(w, *m, prompt_tokens, 0, r.prefill_seconds, 0);
    fmt::print("{}\n", w.end_object().str());
    return 0;
  }
  for (int64_t i = 0; i < k; i++) {
    std::string text = m->tokenizer() ? decode_text(*m, {order[i]}) : "";
    fmt::print("{:>8} {:>12.6f} {:>9.6f} {:?}\n", order[i], logits[order[i]],
               std::exp(logits[order[i]] - mx) / z, text);
  }
  return 0;
}

}  // namespace waste::cli
