// Strict base64 (RFC 4648 alphabet, `=` padding, no whitespace) with the decoded size known
// and capped from the length alone: for tokenizer rank files and for data: URLs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace waste {

// The size base64 text of this length decodes to, from its length and padding alone.
// Throws UsageError when the length is not a multiple of 4.
size_t base64_decoded_size(std::string_view text);

// Strict RFC 4648 base64. Throws UsageError naming the problem (a character outside the
// alphabet and its offset, misplaced padding, a length that is not a multiple of 4, non-zero
// bits in the last group) or, before decoding, a result larger than `max_bytes`.
std::vector<uint8_t> base64_decode(std::string_view text, size_t max_bytes);

}  // namespace waste
