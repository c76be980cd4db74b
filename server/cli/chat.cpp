// `waste chat`: an interactive conversation on the terminal, in the model's chat format, through
// the Decoder the daemon uses. The session carries over between turns: only the new part of each
// prompt is computed.
#include <iostream>

#include <fmt/format.h>

#include "prompt_templates/chat_format.h"
#include "prompt_templates/reply_parser.h"
#include "server/cli/commands.h"
#include "server/cli/images.h"
#include "server/cli/model_args.h"
#include "server/runtime/decoder.h"

namespace waste::cli {

namespace {

struct ChatState {
  Conversation conversation;
  Session session;
  std::unique_ptr<ImageEncoder> encoder;  // made by the first /image
  std::vector<PromptImage> images;        // the conversation's, in order
  std::vector<PromptImage> pending;       // attached to the next user message
};

void attach_image(const ModelHost& m, const ChatFormat& format, ChatState& st,
                  const std::string& path) {
  if (!st.encoder) st.encoder = image_encoder(m, format);
  st.pending.push_back(load_image_file(path, *st.encoder));
  const PreprocessedImage& p = *st.pending.back().pixels;
  fmt::print("attached {} ({}x{}, {} positions) to your next message\n", path, p.orig_w, p.orig_h,
             p.tokens);
}

// The user's line, after the images attached to it.
ChatMessage user_message(const ChatState& st, const std::string& line) {
  ChatMessage msg;
  msg.role = Role::kUser;
  msg.content = line;
  if (st.pending.empty()) return msg;
  std::vector<ContentPart> parts;
  for (const PromptImage& im : st.pending)
    parts.push_back({ContentPart::Kind::kImage, "", im.where});
  parts.push_back({ContentPart::Kind::kText, line, ""});
  msg.content = std::move(parts);
  return msg;
}

// The conversation as a Decoder input; with images, their blocks are widened to their positions.
DecodeInput render(const ChatFormat& format, ChatState& st, bool* thinking) {
  DecodeInput in;
  std::vector<PromptImage> all = st.images;
  all.insert(all.end(), st.pending.begin(), st.pending.end());
  if (!all.empty()) in.images = std::make_shared<PromptImages>(*st.encoder, std::move(all));
  RenderedPrompt p = render_with_images(format, st.conversation, in.images.get());
  in.prompt = std::move(p.ids);
  // Thinking off on a K2 model with a think channel: the channel is written empty in its place.
  in.forced = format.forced_opening(st.conversation, p.thinking);
  in.end_ids = format.end_ids();
  *thinking = p.thinking;
  return in;
}

// Reasoning dimmed, the answer plain; the answer is kept for the conversation's history.
class TerminalSink final : public ReplySink {
 public:
  void on_event(const ReplyEvent& e) override {
    if (e.text.empty()) return;
    const bool r = e.kind == ReplyEvent::Kind::kReasoning;
    if (r != in_reasoning_) fmt::print("{}", r ? "\x1b[2m" : "\x1b[0m");
    in_reasoning_ = r;
    if (e.kind == ReplyEvent::Kind::kContent) answer += e.text;
    fmt::print("{}", e.text);
    std::fflush(stdout);
  }
  std::string answer;

 private:
  bool in_reasoning_ = false;
};

void print_stats(const ModelHost& m, const ChatState& st) {
  ExpertStats s = m.model().expert_stats();
  const LookaheadStats& la = m.model().lookahead_stats();
  fmt::print(
      "position {} of {}; expert cache: {} hits, {} misses, {:.1f} MB read; lookahead {}/{} "
      "right\n",
      st.session.pos(), st.session.ctx(), s.hits, s.misses, s.bytes_read / 1e6, la.correct,
      la.predicted);
}

// /save FILE and /load FILE: the session on disk.
void save_or_load(ChatState& st, const std::string& line) {
  const bool save = line[1] == 's';
  const std::string path = line.substr(6);
  try {
    if (save)
      st.session.save(path);
    else
      st.session.load(path);
    fmt::print("{} {} ({} positions)\n", save ? "saved" : "loaded", path, st.session.pos());
  } catch (const std::exception& e) {
    fmt::print("error: {}\n", e.what());
  }
}

// One turn: the user's line, the model's reply printed as it comes and kept in the history.
void turn(ModelHost& m, const ChatFormat& format, Decoder& decoder, const SamplerParams& sp,
          int64_t max_new, ChatState& st, const std::string& line) {
  st.conversation.messages.push_back(user_message(st, line));
  const size_t had_images = st.images.size();
  try {
    bool thinking = false;
    DecodeInput in = render(format, st, &thinking);
    in.sampler = sp;
    in.sampler.seed = reply_seed(in.sampler.seed);  // the parser's call ids use it too
    in.max_new = max_new;
    st.images.insert(st.images.end(), st.pending.begin(), st.pending.end());
    st.pending.clear();
    auto parser = format.parser(thinking, *in.sampler.seed);
    TerminalSink out;
    decoder.run(st.session, in, parser.get(), out);
    fmt::print("\x1b[0m\n");
    ChatMessage reply;
    reply.role = Role::kAssistant;
    reply.content = out.answer;
    reply.reasoning_content = parser->reply().reasoning;
    st.conversation.messages.push_back(reply);
  } catch (const std::exception& e) {
    fmt::print("\x1b[0merror: {}\n", e.what());
    if (!st.pending.empty()) fmt::print("(the attached images were dropped)\n");
    st.pending.clear();
    st.images.erase(st.images.begin() + (ptrdiff_t)had_images, st.images.end());
    st.conversation.messages.pop_back();
    if (st.session.broken) st.session = m.model().new_session(st.session.ctx());
  }
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  Args a(argc, argv, 2, model_valued_flags({"-n", "--temp", "--seed", "--system"}),
         model_boolean_flags({"--no-thinking"}));
  if (a.positional().size() != 1) throw UsageFailure{"expected exactly one MODEL path"};
  SamplerParams sp;
  sp.temperature = (float)a.get_number("--temp", 0.6, 0, 100);
  if (a.has("--seed")) sp.seed = (uint64_t)a.get_int("--seed", 0, 0, INT64_MAX);
  int64_t max_new = a.get_int("-n", 512, 1, 1 << 20);
  auto m = open_model(a.positional()[0], a);
  if (!m->tokenizer()) throw UsageFailure{"this container has no tokenizer.model"};
  ChatFormat format(*m->tokenizer(), m->eos(), ChatDefaults{!a.has("--no-thinking"), "max"});
  ChatState st{Conversation{}, m->model().new_session(m->ctx()), nullptr, {}, {}};
  if (auto sys = a.get("--system")) {
    ChatMessage msg;
    msg.role = Role::kSystem;
    msg.content = *sys;
    st.conversation.messages.push_back(std::move(msg));
  }
  Decoder decoder(m->model(), nullptr);
  fmt::print("waste chat: {} ({} format). /image FILE, /stats, /save FILE, /load FILE, /quit\n",
             a.positional()[0], format.family_name());
  std::string line;
  while (fmt::print("> "), std::fflush(stdout), std::getline(std::cin, line)) {
    if (line == "/quit" || line == "/exit") break;
    if (line == "/stats") {
      print_stats(*m, st);
    } else if (line.rfind("/save ", 0) == 0 || line.rfind("/load ", 0) == 0) {
      save_or_load(st, line);
    } else if (line.rfind("/image ", 0) == 0) {
      try {
        attach_image(*m, format, st, line.substr(7));
      } catch (const UsageFailure& e) {
        fmt::print("error: {}\n", e.message);
      } catch (const std::exception& e) {
        fmt::print("error: {}\n", e.what());
      }
    } else if (!line.empty()) {
      turn(*m, format, decoder, sp, max_new, st, line);
    }
  }
  return 0;
}

}  // namespace waste::cli
