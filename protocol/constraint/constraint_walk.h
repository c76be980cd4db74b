// A random writer for a grammar, for tests and `waste schema --bench`: at each step it takes a
// random allowed token, preferring (more and more as the output grows) tokens that close
// something, so that most outputs finish. It times every mask.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "protocol/constraint/token_constraint.h"

namespace waste {

struct ConstraintWalk {
  std::string text;                 // bytes of the non-special tokens taken
  std::vector<int> ids;             // every token taken
  std::vector<double> mask_micros;  // time of each mask
  bool finished = false;            // the grammar completed within the step budget
};

ConstraintWalk random_walk(const std::shared_ptr<const Grammar>& g, const TokenIndex& index,
                           uint64_t seed, int max_steps);

}  // namespace waste
