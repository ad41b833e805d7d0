// Sennrich BPE as a Tokenizer: vocabulary layout, encoding with whitespace and byte-fallback ids,
// decoding with the implied space between words. See sennrich_tokenizer.h.
#include "tokenizer/sennrich_tokenizer.h"

#include <fmt/format.h>

#include <set>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/text_lines.h"

namespace tformer {

namespace {

constexpr std::string_view kEndOfWord = "</w>";
constexpr TokenId kNewline = SennrichTokenizer::kFirstWhitespace + SennrichTokenizer::kMaxSpaceRun;  // "\n"
constexpr TokenId kNewlines = kNewline + 1;                                                          // "\n\n"
constexpr TokenId kReturn = kNewline + 2;                                                            // "\r"
constexpr TokenId kReturnNewline = kNewline + 3;                                                     // "\r\n"
static_assert(kReturnNewline + 1 == SennrichTokenizer::kFirstSymbol);

bool is_separator(char c) { return c == ' ' || c == '\n' || c == '\r'; }

bool is_one_code_point(std::string_view s) {
  return !s.empty() && !find_invalid_utf8(s) && utf8_sequence_length(static_cast<unsigned char>(s[0])) == s.size();
}

// True when s ends with a line break that subword-nmt keeps inside a word (text_lines.h).
bool ends_in_kept_break(std::string_view s) {
  if (s.empty()) return false;
  const auto c = static_cast<unsigned char>(s.back());
  if (c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E)) return true;
  return s.ends_with("\xc2\x85") || s.ends_with("\xe2\x80\xa8") || s.ends_with("\xe2\x80\xa9");
}

}  // namespace

struct SennrichTokenizer::Cache {
  std::unordered_map<std::string, std::vector<TokenId>> words;
  std::vector<SennrichBpe::Piece> pieces;
};

SennrichTokenizer::SennrichTokenizer(SennrichBpe bpe, const std::vector<std::string>& alphabet) : bpe_(std::move(bpe)) {
  const bool v2 = bpe_.version_minor() == 2;
  // Characters the codes mention; UTF-8 byte order is code point order.
  std::set<std::string> chars;
  for (const std::string& s : bpe_.symbols()) {
    std::string_view core = s;
    if (core.ends_with(kEndOfWord)) core.remove_suffix(kEndOfWord.size());
    if (is_one_code_point(core)) chars.emplace(core);
  }
  std::set<std::string> extra;
  for (const std::string& c : alphabet) {
    if (!is_one_code_point(c)) fail_input(c, "bpe tokenizer: alphabet entry '{}' is not one valid UTF-8 character", c);
    if (is_separator(c[0]))
      fail_input(fmt::format("0x{:02x}", static_cast<unsigned char>(c[0])),
                 "bpe tokenizer: alphabet entry 0x{:02x} is a word separator (space, \\n or \\r)",
                 static_cast<unsigned char>(c[0]));
    if (!chars.contains(c)) extra.insert(c);
  }
  extra_alphabet_.assign(extra.begin(), extra.end());
  chars.insert(extra.begin(), extra.end());

  for (int b = 0; b < 256; ++b) text_.emplace_back(1, static_cast<char>(b));
  for (int k = 1; k <= kMaxSpaceRun; ++k) text_.emplace_back(static_cast<size_t>(k), ' ');
  for (const char* ws : {"\n", "\n\n", "\r", "\r\n"}) text_.emplace_back(ws);
  symbol_.assign(text_.size(), "");
  implies_space_.assign(text_.size(), 0);
  auto add_symbol = [&](const std::string& s) {
    if (symbol_ids_.contains(s)) return;
    const auto id = static_cast<TokenId>(text_.size());
    symbol_ids_.emplace(s, id);
    symbol_.push_back(s);
    const bool final = s.ends_with(kEndOfWord);
    std::string text = final ? s.substr(0, s.size() - kEndOfWord.size()) : s;
    implies_space_.push_back(final && !ends_in_kept_break(text));
    text_.push_back(std::move(text));
  };
  for (const std::string& c : chars) {
    add_symbol(c);
    if (v2) add_symbol(c + std::string(kEndOfWord));
  }
  if (!v2) add_symbol(std::string(kEndOfWord));
  for (const auto& [a, b] : bpe_.merges()) add_symbol(a + b);
  of_bpe_symbol_.reserve(bpe_.symbols().size());
  for (const std::string& s : bpe_.symbols()) of_bpe_symbol_.push_back(symbol_ids_.at(s));
}

SennrichTokenizer::SennrichTokenizer(SennrichTokenizer&&) noexcept = default;
SennrichTokenizer& SennrichTokenizer::operator=(SennrichTokenizer&&) noexcept = default;
SennrichTokenizer::~SennrichTokenizer() = default;

SennrichTokenizer SennrichTokenizer::from_codes(std::string_view codes, const std::string& name,
                                                const std::vector<std::string>& alphabet) {
  return SennrichTokenizer(SennrichBpe::from_codes(codes, name), alphabet);
}

SennrichTokenizer SennrichTokenizer::load_codes(const std::string& path, const std::vector<std::string>& alphabet) {
  return SennrichTokenizer(SennrichBpe::load(path), alphabet);
}

SennrichTokenizer SennrichTokenizer::from_merges(const std::vector<std::pair<std::string, std::string>>& merges,
                                                 const std::vector<std::string>& alphabet) {
  return SennrichTokenizer(SennrichBpe::from_merges(merges, "<learned merges>"), alphabet);
}

SennrichTokenizer SennrichTokenizer::from_json(const nlohmann::json& j) {
  if (!j.is_object() || j.value("kind", "") != "bpe") fail_file("kind", "bpe tokenizer JSON: \"kind\" is not \"bpe\"");
  if (!j.contains("version") || j["version"] != 1)
    fail_unsupported("version", "bpe tokenizer JSON: unsupported \"version\" (expected 1)");
  const std::string version = j.contains("codes_version") && j["codes_version"].is_string()
                                  ? j["codes_version"].get<std::string>()
                                  : std::string();
  if (version != "0.1" && version != "0.2")
    fail_unsupported("codes_version", "bpe tokenizer JSON: \"codes_version\" must be \"0.1\" or \"0.2\"");
  if (!j.contains("merges") || !j["merges"].is_array())
    fail_file("merges", "bpe tokenizer JSON: missing array \"merges\"");
  std::string codes = version == "0.2" ? "#version: 0.2\n" : "";
  const auto& merges = j["merges"];
  for (size_t i = 0; i < merges.size(); ++i) {
    const auto& m = merges[i];
    if (!m.is_array() || m.size() != 2 || !m[0].is_string() || !m[1].is_string())
      fail_file("merges", "bpe tokenizer JSON: \"merges\"[{}] = {} is not a pair of strings", i, m.dump());
    for (const auto& part : m) {
      const auto& s = part.get_ref<const std::string&>();
      if (s.empty() || s.find_first_of(" \n\r") != std::string::npos)
        fail_file("merges", "bpe tokenizer JSON: \"merges\"[{}] = {}: a part is empty or holds a space or line break",
                  i, m.dump());
    }
    codes += m[0].get<std::string>() + ' ' + m[1].get<std::string>() + '\n';
  }
  if (version == "0.1" && (merges.empty() || codes.starts_with("#version:")))
    fail_file("merges",
              "bpe tokenizer JSON: version 0.1 codes need at least one merge, and not one spelled like a header");
  std::vector<std::string> alphabet;
  if (j.contains("alphabet")) {
    if (!j["alphabet"].is_array()) fail_file("alphabet", "bpe tokenizer JSON: \"alphabet\" is not an array");
    for (size_t i = 0; i < j["alphabet"].size(); ++i) {
      const auto& c = j["alphabet"][i];
      if (!c.is_string())
        fail_file("alphabet", "bpe tokenizer JSON: \"alphabet\"[{}] = {} is not a string", i, c.dump());
      alphabet.push_back(c.get<std::string>());
    }
  }
  // Codes errors name the line of the merges written as a codes file: line k+2 is "merges"[k] in
  // version 0.2, line k+1 in version 0.1.
  const char* const codes_name = "bpe tokenizer JSON \"merges\" as a codes file";
  SennrichTokenizer tok = [&] {
    try {
      return from_codes(codes, codes_name, alphabet);
    } catch (const Error& e) {
      // An alphabet entry: the JSON's contents are bad, not a caller's data. The codes: its "merges".
      if (e.kind() == ErrorKind::BadInput) throw Error(ErrorKind::BadFile, e.field(), e.what());
      if (e.field() == codes_name) throw Error(e.kind(), "merges", e.what());
      throw;
    }
  }();
  if (j.contains("vocab_size") && (!j["vocab_size"].is_number_integer() || j["vocab_size"] != tok.vocab_size()))
    fail_file("vocab_size", "bpe tokenizer JSON: \"vocab_size\" is {}, but the merges and alphabet make {}",
              j["vocab_size"].dump(), tok.vocab_size());
  return tok;
}

nlohmann::json SennrichTokenizer::to_json() const {
  nlohmann::json j;
  j["kind"] = "bpe";
  j["version"] = 1;
  j["codes_version"] = bpe_.version_minor() == 2 ? "0.2" : "0.1";
  nlohmann::json merges = nlohmann::json::array();
  for (const auto& [a, b] : bpe_.merges()) merges.push_back({a, b});
  j["merges"] = std::move(merges);
  j["alphabet"] = extra_alphabet_;
  j["vocab_size"] = vocab_size();
  return j;
}

std::optional<TokenId> SennrichTokenizer::symbol_id(std::string_view symbol) const {
  auto it = symbol_ids_.find(std::string(symbol));
  if (it == symbol_ids_.end()) return std::nullopt;
  return it->second;
}

std::string SennrichTokenizer::token_name(TokenId id) const {
  if (id < 0 || id >= vocab_size()) return fmt::format("<invalid {}>", id);
  if (id < 256) return fmt::format("<0x{:02x}>", id);
  if (id < kNewline) return fmt::format("<space x{}>", id - kFirstWhitespace + 1);
  if (id < kFirstSymbol) {
    static const char* const names[] = {"<\\n>", "<\\n\\n>", "<\\r>", "<\\r\\n>"};
    return names[id - kNewline];
  }
  return symbol_[static_cast<size_t>(id)];
}

void SennrichTokenizer::append_token_bytes(TokenId id, std::string& out) const {
  if (id < 0 || id >= vocab_size()) [[unlikely]]
    fail_input(fmt::format("token id {}", id), "bpe tokenizer: token id {} is outside the vocabulary (size {})", id,
               vocab_size());
  out += text_[static_cast<size_t>(id)];
}

void SennrichTokenizer::append_token_bytes_after(TokenId previous, TokenId id, std::string& out) const {
  if (id < 0 || id >= vocab_size()) [[unlikely]]
    fail_input(fmt::format("token id {}", id), "bpe tokenizer: token id {} is outside the vocabulary (size {})", id,
               vocab_size());
  if (ends_word(previous) && is_symbol(id)) out += ' ';
  out += text_[static_cast<size_t>(id)];
}

void SennrichTokenizer::encode_separator(std::string_view sep, std::vector<TokenId>& out) const {
  size_t i = 0;
  while (i < sep.size()) {
    const char c = sep[i];
    if (c == ' ') {
      size_t run = 0;
      while (i + run < sep.size() && sep[i + run] == ' ') ++run;
      i += run;
      for (; run > 0; run -= std::min<size_t>(run, kMaxSpaceRun))
        out.push_back(kFirstWhitespace + static_cast<TokenId>(std::min<size_t>(run, kMaxSpaceRun)) - 1);
    } else if (c == '\n') {
      const bool two = i + 1 < sep.size() && sep[i + 1] == '\n';
      out.push_back(two ? kNewlines : kNewline);
      i += two ? 2 : 1;
    } else {  // '\r'
      const bool crlf = i + 1 < sep.size() && sep[i + 1] == '\n';
      out.push_back(crlf ? kReturnNewline : kReturn);
      i += crlf ? 2 : 1;
    }
  }
}

// One stretch of valid UTF-8 without separators, segmented as a word.
void SennrichTokenizer::encode_stretch(std::string_view stretch, Cache& cache, std::vector<TokenId>& out) const {
  constexpr size_t kCachedLength = 64;
  if (stretch.size() <= kCachedLength) {
    if (auto it = cache.words.find(std::string(stretch)); it != cache.words.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t first = out.size();
  const bool v2 = bpe_.version_minor() == 2;
  bpe_.segment_pieces(stretch, cache.pieces);
  std::string name;
  for (size_t k = 0; k < cache.pieces.size(); ++k) {
    const SennrichBpe::Piece& p = cache.pieces[k];
    const bool last = k + 1 == cache.pieces.size();
    const std::string_view bytes = stretch.substr(p.begin, p.end - p.begin);
    TokenId t = -1;
    if (p.id >= 0) {
      t = of_bpe_symbol_[static_cast<size_t>(p.id)];
    } else {
      // A character no merge mentions: it may still be in the alphabet.
      name.assign(bytes);
      if (last && v2) name += kEndOfWord;
      if (auto it = symbol_ids_.find(name); it != symbol_ids_.end()) t = it->second;
    }
    // The symbol must decode to exactly this piece, and only a word's last piece may imply a
    // space after it (a symbol string such as "a</w>" can also be spelled by the text itself).
    if (t >= 0 && text_[static_cast<size_t>(t)] == bytes && (last || !implies_space_[static_cast<size_t>(t)])) {
      out.push_back(t);
    } else {
      for (char c : bytes) out.push_back(static_cast<unsigned char>(c));
    }
  }
  if (stretch.size() <= kCachedLength) {
    if (cache.words.size() >= (size_t{1} << 18)) cache.words.clear();
    cache.words.emplace(std::string(stretch),
                        std::vector<TokenId>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
  }
}

// A word (no separators) that may hold invalid UTF-8: valid stretches are segmented as words of
// their own, each invalid byte becomes its byte id.
void SennrichTokenizer::encode_word(std::string_view word, Cache& cache, std::vector<TokenId>& out) const {
  while (!word.empty()) {
    const auto bad = find_invalid_utf8(word);
    const size_t good = bad ? *bad : word.size();
    if (good > 0) encode_stretch(word.substr(0, good), cache, out);
    if (!bad) break;
    out.push_back(static_cast<unsigned char>(word[good]));
    word.remove_prefix(good + 1);
  }
}

std::vector<TokenId> SennrichTokenizer::encode(std::string_view text, bool /*allow_special*/) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 16);
  Cache cache;
  std::vector<TokenId> word_ids;
  bool last_implies_space = false;  // the last id written is a word-final symbol that implies a space
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const size_t sep_start = i;
    while (i < n && is_separator(text[i])) ++i;
    const std::string_view sep = text.substr(sep_start, i - sep_start);
    // The word: up to a separator, or just after a kept line break.
    const size_t word_start = i;
    while (i < n) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (c > 0x20 && c != 0xC2 && c != 0xE2) {
        ++i;
        continue;
      }
      if (is_separator(static_cast<char>(c))) break;
      if (const size_t b = text::splitlines_break_at(text, i); b > 0) {
        i += b;
        break;
      }
      ++i;
    }
    word_ids.clear();
    encode_word(text.substr(word_start, i - word_start), cache, word_ids);
    if (!sep.empty()) {
      const bool implied =
          sep.size() == 1 && sep[0] == ' ' && last_implies_space && !word_ids.empty() && is_symbol(word_ids.front());
      if (!implied) {
        encode_separator(sep, out);
        last_implies_space = false;
      }
    }
    if (!word_ids.empty()) {
      out.insert(out.end(), word_ids.begin(), word_ids.end());
      last_implies_space = implies_space_[static_cast<size_t>(word_ids.back())];
    }
  }
  return out;
}

}  // namespace tformer
