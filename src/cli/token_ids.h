// The token-id lists the command line reads: `tformer detokenize --ids "15496 995"` (or --input
// FILE) and `tformer logits --tokens "72 101"`. Kept apart from the commands so that the fuzz
// target fuzz/fuzz_token_ids.cpp runs exactly what they run.
#pragma once

#include <string>
#include <vector>

#include "core/types.h"

namespace tformer::cli {

// detokenize: decimal ids separated by whitespace (space, \t, \n, \r, \f, \v), each 0..INT32_MAX,
// no sign; an empty list is allowed. An error names `where` and the offending word and its
// position: BadInput when `where` is a flag ("--ids"), BadFile otherwise (a file's path).
std::vector<TokenId> parse_ids(const std::string& text, const std::string& where);

// logits --tokens: words separated by whitespace, each a decimal 0..INT32_MAX (a leading '+' is
// accepted); an error (BadInput, --tokens) names the word and its position.
std::vector<TokenId> parse_logits_tokens(const std::string& s);

}  // namespace tformer::cli
