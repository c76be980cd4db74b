// A ResponseWriter that records what a sink writes, and the events sinks are fed, for the sink
// tests of every API.
#pragma once

#include <fmt/format.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "prompt_templates/reply_parser.h"
#include "server/http/http.h"

namespace waste::test {

// Every call as one line: "send 200 application/json BODY", "start", "event DATA",
// "event:NAME DATA", "finish"; named events also as (name, data) pairs, and the stream's
// keepalive as it was declared.
class RecordingWriter final : public http::ResponseWriter {
 public:
  bool send(int status, const std::string& type, std::string body,
            const std::map<std::string, std::string>&) override {
    calls.push_back(fmt::format("send {} {} {}", status, type, body));
    return true;
  }
  bool start_events(http::Keepalive k) override {
    calls.push_back("start");
    keepalive = std::move(k);
    return true;
  }
  bool event(const std::string& data) override {
    calls.push_back("event " + data);
    return true;
  }
  bool named_event(const std::string& name, const std::string& data) override {
    calls.push_back("event:" + name + " " + data);
    named.push_back({name, data});
    return true;
  }
  void finish() override { calls.push_back("finish"); }
  bool closed() const override { return gone; }

  // The named events' names, in order.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& [name, data] : named) out.push_back(name);
    return out;
  }

  std::vector<std::string> calls;
  std::vector<std::pair<std::string, std::string>> named;
  http::Keepalive keepalive;
  bool gone = false;
};

// One reply event for a sink to write (a tool call's start carries `id` and `name`).
inline ReplyEvent reply_event(ReplyEvent::Kind k, std::string text = "", std::string id = "call_1",
                              std::string name = "f") {
  ReplyEvent e;
  e.kind = k;
  e.text = std::move(text);
  e.id = std::move(id);
  e.name = std::move(name);
  return e;
}

}  // namespace waste::test
