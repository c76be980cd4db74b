// Runs a Grammar over symbols. The state is a set of threads (alternatives still alive, as from
// anyOf); each thread is a stack of frames kept as a chain of parent links in an arena, so
// advancing a thread copies one or two frames and never the stack. Token masks (see
// token_constraint.h) advance many trial states from one committed state; they allocate above a
// mark and roll back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "protocol/constraint/grammar.h"

namespace waste {

class GrammarMatcher {
 public:
  using Top = int32_t;              // arena index of a thread's top frame
  static constexpr Top kDone = -1;  // the root value (and everything after it) is complete
  static constexpr size_t kMaxThreads = 64;

  explicit GrammarMatcher(const Grammar& g);

  const std::vector<Top>& threads() const { return threads_; }
  bool done() const;  // some thread has completed the grammar

  // Appends to `out` every thread that `t` becomes after `s` (none: `s` is not allowed).
  void feed(Top t, Symbol s, std::vector<Top>& out);

  // Makes `next` the committed threads (duplicates dropped) and reclaims the arena.
  void commit(const std::vector<Top>& next);

  size_t mark() const { return arena_.size(); }
  void rollback(size_t mark) { arena_.resize(mark); }

  // When `t` is inside a string with no pattern, between characters: how many more code points
  // it may take and whether it is raw text. Any token of only such characters (a "plain" token)
  // leaves the thread where it is but for the count, so masks can take them in bulk.
  bool plain_string(Top t, bool& raw, uint32_t& room) const;

  // When `t` is inside a string with a pattern, between characters: the pattern's DFA, its
  // state, the code points so far and the string's node.
  struct PatternString {
    int node, dfa, state;
    uint32_t count;
  };
  bool pattern_string(Top t, PatternString& p) const;

  // Appends bytes that identify everything that decides what may follow `t`: two threads with
  // the same signature allow the same tokens. A string's length is left out once no token can
  // reach its bounds (at least `long_token` code points of room, or none and the minimum met),
  // so the steps inside one long string share a signature.
  void signature(Top t, uint32_t long_token, std::string& out) const;

 private:
  struct Frame {
    int32_t node = -1;
    int32_t parent = -1;
    uint8_t type = 0;    // FrameType
    uint8_t phase = 0;   // per kind
    uint16_t aux = 0;    // strings: UTF-8 continuation state; numbers: sign and digit counts
    uint32_t count = 0;  // code points, items, or the next property
    int32_t sel = -1;    // trie node, DFA state, or chosen property
    // numbers: digits of the integer and fraction parts; objects: `whole` counts the properties
    // written; free keys: `whole` is the key rule's DFA state
    uint64_t whole = 0, frac = 0;
  };

  Top push(const Frame& f);
  void enter(int node, Top parent, std::vector<Top>& out);
  void child_done(Top parent, int result, const Symbol* refeed, std::vector<Top>& out);
  void continue_with(Top t, const Symbol* refeed, std::vector<Top>& out);

  void feed_literal(const Frame& f, Symbol s, std::vector<Top>& out);
  void feed_string(const Frame& f, Symbol s, std::vector<Top>& out);
  int text_rule(const Frame& f) const;
  bool string_byte(Frame& f, uint8_t b, bool raw) const;
  bool string_can_end(const Frame& f) const;
  void feed_escape(const Frame& f, Symbol s, std::vector<Top>& out);
  void feed_number(const Frame& f, Symbol s, std::vector<Top>& out);
  bool number_feasible(const Frame& f) const;
  bool number_can_end(const Frame& f) const;
  void feed_object(const Frame& f, Symbol s, std::vector<Top>& out);
  void start_key(const Frame& f, Symbol s, std::vector<Top>& out);
  void feed_key(const Frame& f, Symbol s, std::vector<Top>& out);
  void feed_free_key(const Frame& f, Symbol s, std::vector<Top>& out);
  void feed_array(const Frame& f, Symbol s, std::vector<Top>& out);
  void feed_typed_args(const Frame& f, Symbol s, std::vector<Top>& out);
  bool same(Top a, Top b) const;

  const Grammar& g_;
  std::vector<Frame> arena_;
  std::vector<Top> threads_;
};

}  // namespace waste
