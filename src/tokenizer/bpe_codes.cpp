// Sennrich BPE codes: parsing and validating a codes file the way subword-nmt reads one (the
// version header, one merge per line, every part a character or an earlier merge's result), and
// what was parsed. Segmentation: bpe_segment.cpp; applying to text: bpe_apply.cpp.
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/file_io.h"
#include "core/utf8.h"
#include "tokenizer/sennrich_bpe.h"
#include "tokenizer/sennrich_bpe_impl.h"
#include "tokenizer/text_lines.h"

namespace tformer {

void SennrichBpe::Impl::add_merge(const std::string& first, const std::string& second, const std::string& name,
                                  int64_t line, std::unordered_map<uint64_t, int64_t>& line_of) {
  auto producible = [&](const std::string& part) {
    if (symbol_ids.contains(part) && produced.contains(part)) return true;
    if (is_one_code_point(part)) return true;
    if (version_minor == 1) return part == kEndOfWord;
    return part.size() > kEndOfWord.size() && part.ends_with(kEndOfWord) &&
           is_one_code_point(std::string_view(part).substr(0, part.size() - kEndOfWord.size()));
  };
  for (const std::string* part : {&first, &second})
    if (!producible(*part))
      fail_file(name, "{}:{}: '{} {}': '{}' is neither a character{} nor the result of an earlier merge", name, line,
                first, second, *part, version_minor == 2 ? " (optionally followed by </w>)" : " nor </w>");
  const int32_t a = intern(first), b = intern(second);
  const uint64_t key = pair_key(a, b);
  if (auto it = line_of.find(key); it != line_of.end())
    fail_file(name, "{}:{}: duplicate merge '{} {}' (first at line {})", name, line, first, second, it->second);
  line_of.emplace(key, line);
  const std::string result = first + second;
  const int32_t r = intern(result);
  produced.insert(result);
  merges.emplace(key, Merge{static_cast<int32_t>(n_merges), r});
  by_rank.push_back({a, b, r});
  ++n_merges;
}

SennrichBpe::SennrichBpe(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SennrichBpe::SennrichBpe(SennrichBpe&&) noexcept = default;
SennrichBpe& SennrichBpe::operator=(SennrichBpe&&) noexcept = default;
SennrichBpe::~SennrichBpe() = default;

SennrichBpe SennrichBpe::from_codes(std::string_view codes, const std::string& name, int64_t max_merges) {
  if (auto bad = find_invalid_utf8(codes)) fail_file(name, "{}: invalid UTF-8 at byte offset {}", name, *bad);
  if (codes.empty()) fail_file(name, "{}:1: empty codes file (expected '#version: 0.2' and one merge per line)", name);
  auto impl = std::make_unique<Impl>();
  // The first line, as Python's readline() on a codecs reader sees it.
  size_t first_end = 0;
  while (first_end < codes.size()) {
    const size_t b = text::splitlines_break_at(codes, first_end);
    if (b > 0) {
      first_end += b;
      break;
    }
    ++first_end;
  }
  std::string_view rest = codes;
  int64_t line_offset = 1;  // file line of the first merge line
  const std::string_view first_line = codes.substr(0, first_end);
  if (first_line.starts_with("#version:")) {
    // Version: the last whitespace-separated word, trailing ".0" groups removed ("0.2.0" = "0.2").
    std::string_view v = first_line;
    auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; };
    while (!v.empty() && space(v.back())) v.remove_suffix(1);
    size_t s = v.size();
    while (s > 0 && !space(v[s - 1])) --s;
    std::string version(v.substr(s));
    while (true) {
      const size_t dot = version.rfind('.');
      if (dot == std::string::npos || dot + 1 == version.size() ||
          version.find_first_not_of('0', dot + 1) != std::string::npos)
        break;
      version.resize(dot);
    }
    if (version == "0.2") {
      impl->version_minor = 2;
    } else if (version == "0.1") {
      impl->version_minor = 1;
    } else if (first_line.find("byte") != std::string_view::npos) {
      fail_file(name, "{}:1: byte-level codes ('{}') are not Sennrich character BPE codes", name, v);
    } else {
      fail_unsupported(name, "{}:1: unsupported codes version in '{}' (expected '#version: 0.2')", name, v);
    }
    rest = codes.substr(first_end);
    line_offset = 2;
  } else {
    impl->version_minor = 1;  // subword-nmt reads a file without a header as version 0.1
  }
  if (impl->version_minor == 1) impl->end_of_word_id = impl->intern(kEndOfWord);
  while (!rest.empty() && rest.back() == '\n') rest.remove_suffix(1);
  std::unordered_map<uint64_t, int64_t> line_of;
  if (!rest.empty()) {
    int64_t index = 0;
    size_t start = 0;
    while (start <= rest.size()) {
      if (max_merges >= 0 && index >= max_merges) break;
      size_t end = rest.find('\n', start);
      if (end == std::string_view::npos) end = rest.size();
      std::string_view item = rest.substr(start, end - start);
      const int64_t line = index + line_offset;
      auto strip = [](char c) { return c == '\r' || c == '\n' || c == ' '; };
      while (!item.empty() && strip(item.front())) item.remove_prefix(1);
      while (!item.empty() && strip(item.back())) item.remove_suffix(1);
      const size_t sp = item.find(' ');
      if (item.empty() || sp == std::string_view::npos || item.find(' ', sp + 1) != std::string_view::npos)
        fail_file(name, "{}:{}: expected two symbols separated by one space, got '{}'", name, line, item);
      impl->add_merge(std::string(item.substr(0, sp)), std::string(item.substr(sp + 1)), name, line, line_of);
      ++index;
      start = end + 1;
    }
  }
  impl->produced.clear();
  impl->finish();
  return SennrichBpe(std::move(impl));
}

SennrichBpe SennrichBpe::load(const std::string& path, int64_t max_merges) {
  return from_codes(read_file(path), path, max_merges);
}

SennrichBpe SennrichBpe::from_merges(const std::vector<std::pair<std::string, std::string>>& merges,
                                     const std::string& name) {
  return from_codes(format_bpe_codes(merges), name);
}

std::vector<std::pair<std::string, std::string>> SennrichBpe::merges() const {
  std::vector<std::pair<std::string, std::string>> out;
  out.reserve(impl_->by_rank.size());
  for (const auto& [a, b, r] : impl_->by_rank) out.emplace_back(impl_->symbols[a], impl_->symbols[b]);
  return out;
}

const std::vector<std::string>& SennrichBpe::symbols() const { return impl_->symbols; }
int64_t SennrichBpe::num_merges() const { return impl_->n_merges; }
int SennrichBpe::version_minor() const { return impl_->version_minor; }

}  // namespace tformer
