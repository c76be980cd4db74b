// `waste chat`: an interactive conversation on the terminal, in the model's chat format. The
// session carries over between turns: only the new part of each prompt is computed.
#include <chrono>
#include <iostream>

#include <fmt/format.h>

#include "engine/sampler.h"
#include "prompt_templates/reply_parser.h"
#include "server/chat_format.h"
#include "server/cli_commands.h"
#include "server/cli_images.h"
#include "server/cli_model.h"

namespace waste::cli {

namespace {

struct ChatState {
  ChatRequest conversation;
  Session session;
  std::vector<float> logits;
  std::unique_ptr<ImageEncoder> encoder;  // made by the first /image
  std::vector<PromptImage> images;        // the conversation's, in order
  std::vector<PromptImage> pending;       // attached to the next user message
};

// Feeds the part of `prompt` the session does not hold yet; restarts if the history diverged.
void catch_up(Model& m, ChatState& st, const std::vector<int32_t>& prompt, PromptImages* images) {
  const auto& have = st.session.tokens;
  bool prefix = have.size() < prompt.size() && std::equal(have.begin(), have.end(), prompt.begin());
  if (!prefix) st.session = m.new_session(st.session.ctx());
  std::span<const int32_t> rest(prompt.data() + st.session.pos(), prompt.size() - st.session.pos());
  forward_prompt(m, st.session, rest, (size_t)st.session.pos(), images, st.logits.data());
}

void attach_image(const LoadedModel& m, ChatState& st, const std::string& path) {
  if (!st.encoder) st.encoder = image_encoder(m);
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

// Renders the conversation; with images, their blocks are widened to their positions.
RenderedPrompt render(const ChatFormat& format, ChatState& st,
                      std::unique_ptr<PromptImages>& images) {
  std::vector<PromptImage> all = st.images;
  all.insert(all.end(), st.pending.begin(), st.pending.end());
  if (all.empty()) return format.render(st.conversation);
  images = std::make_unique<PromptImages>(*st.encoder, std::move(all));
  RenderedPrompt p = format.render(st.conversation, images->media_prompts());
  images->place(p.ids, p.boundary, (int32_t)st.encoder->config().placeholder_id);
  return p;
}

void print_stats(const LoadedModel& m, const ChatState& st) {
  ExpertStats s = m.model->expert_stats();
  const LookaheadStats& la = m.model->lookahead_stats();
  fmt::print(
      "position {} of {}; expert cache: {} hits, {} misses, {:.1f} MB read; lookahead {}/{} "
      "right\n",
      st.session.pos(), st.session.ctx(), s.hits, s.misses, s.bytes_read / 1e6, la.correct,
      la.predicted);
}

}  // namespace

int cmd_chat(int argc, char** argv) {
  std::set<std::string> valued = kModelValuedFlags;
  valued.insert({"-n", "--temp", "--seed", "--system"});
  Args a(argc, argv, 2, valued, {"--verify", "--no-thinking"});
  if (a.positional().size() != 1) throw UsageFailure{"expected exactly one MODEL path"};
  LoadedModel m = load_model(a.positional()[0], a);
  if (!m.tokenizer) throw UsageFailure{"this container has no tokenizer.model"};
  ChatFormat format(*m.container, *m.tokenizer, ChatDefaults{!a.has("--no-thinking"), "max"});
  SamplerParams sp;
  sp.temperature = std::stof(a.get_or("--temp", "0.6"));
  if (a.has("--seed")) sp.seed = (uint64_t)a.get_int("--seed", 0, 0, INT64_MAX);
  Sampler sampler(sp, m.model->config().vocab);
  int64_t max_new = a.get_int("-n", 512, 1, 1 << 20);
  ChatState st{ChatRequest{}, m.model->new_session(m.plan.ctx),
               std::vector<float>(m.model->config().vocab), nullptr, {}, {}};
  if (auto sys = a.get("--system")) {
    ChatMessage msg;
    msg.role = Role::kSystem;
    msg.content = *sys;
    st.conversation.messages.push_back(std::move(msg));
  }
  fmt::print("waste chat: {} ({} format). /image FILE, /stats, /save FILE, /load FILE, /quit\n",
             a.positional()[0], format.family_name());
  std::string line;
  while (fmt::print("> "), std::fflush(stdout), std::getline(std::cin, line)) {
    if (line == "/quit" || line == "/exit") break;
    if (line == "/stats") {
      print_stats(m, st);
      continue;
    }
    if (line.rfind("/save ", 0) == 0 || line.rfind("/load ", 0) == 0) {
      try {
        if (line[1] == 's')
          st.session.save(line.substr(6));
        else
          st.session.load(line.substr(6));
        fmt::print("{} {} ({} positions)\n", line[1] == 's' ? "saved" : "loaded", line.substr(6),
                   st.session.pos());
      } catch (const std::exception& e) {
        fmt::print("error: {}\n", e.what());
      }
      continue;
    }
    if (line.rfind("/image ", 0) == 0) {
      try {
        attach_image(m, st, line.substr(7));
      } catch (const UsageFailure& e) {
        fmt::print("error: {}\n", e.message);
      } catch (const std::exception& e) {
        fmt::print("error: {}\n", e.what());
      }
      continue;
    }
    if (line.empty()) continue;
    st.conversation.messages.push_back(user_message(st, line));
    const size_t had_images = st.images.size();
    try {
      std::unique_ptr<PromptImages> images;
      RenderedPrompt p = render(format, st, images);
      catch_up(*m.model, st, p.ids, images.get());
      st.images.insert(st.images.end(), st.pending.begin(), st.pending.end());
      st.pending.clear();
      auto parser = format.parser(p.thinking, sampler.seed());
      std::vector<int32_t> out;
      std::string answer;
      bool in_reasoning = false;
      for (int64_t i = 0; i < max_new && st.session.room() > 0; i++) {
        int32_t id = sampler.sample(st.logits, out);
        out.push_back(id);
        for (const ReplyEvent& e : parser->push(id)) {
          bool r = e.kind == ReplyEvent::Kind::kReasoning;
          if (r != in_reasoning && !e.text.empty()) fmt::print("{}", r ? "\x1b[2m" : "\x1b[0m");
          if (!e.text.empty()) in_reasoning = r;
          if (e.kind == ReplyEvent::Kind::kContent) answer += e.text;
          fmt::print("{}", e.text);
          std::fflush(stdout);
        }
        const auto& ends = format.end_ids();
        if (std::find(ends.begin(), ends.end(), id) != ends.end()) break;
        m.model->forward(st.session, std::span<const int32_t>(&out.back(), 1), st.logits.data());
      }
      for (const ReplyEvent& e : parser->finish()) fmt::print("{}", e.text);
      fmt::print("\x1b[0m\n");
      ChatMessage reply;
      reply.role = Role::kAssistant;
      reply.content = answer;
      reply.reasoning_content = parser->reply().reasoning;
      st.conversation.messages.push_back(reply);
    } catch (const std::exception& e) {
      fmt::print("\x1b[0merror: {}\n", e.what());
      if (!st.pending.empty()) fmt::print("(the attached images were dropped)\n");
      st.pending.clear();
      st.images.erase(st.images.begin() + (ptrdiff_t)had_images, st.images.end());
      st.conversation.messages.pop_back();
      if (st.session.broken) st.session = m.model->new_session(st.session.ctx());
    }
  }
  return 0;
}

}  // namespace waste::cli
