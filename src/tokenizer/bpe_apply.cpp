// Sennrich BPE applied to text with apply_bpe.py's line conventions: whitespace kept at the ends of
// a line, words rejoined by single spaces, pieces joined by "@@ ", a cache of segmented words;
// large texts in parallel over chunks of whole lines, and streaming input of any block size.
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/utf8.h"
#include "tokenizer/sennrich_bpe.h"
#include "tokenizer/sennrich_bpe_impl.h"
#include "tokenizer/text_lines.h"

namespace tformer {

// Appends the segmented word, pieces joined by "@@ ".
void SennrichBpe::Impl::append_word(std::string_view word, std::vector<Piece>& scratch, std::string& out) const {
  segment_pieces(word, scratch);
  for (size_t k = 0; k < scratch.size(); ++k) {
    out.append(word.data() + scratch[k].begin, scratch[k].end - scratch[k].begin);
    if (k + 1 < scratch.size()) out += "@@ ";
  }
}

void SennrichBpe::Impl::apply_line(std::string_view line, Cache& cache, std::string& out) const {
  auto ws = [](char c) { return c == '\r' || c == '\n' || c == ' '; };
  size_t lead = 0;
  while (lead < line.size() && ws(line[lead])) ++lead;
  out.append(line.data(), lead);
  if (lead == line.size()) return;  // all whitespace: copied once, as apply_bpe.py does
  size_t end = line.size();
  while (end > lead && ws(line[end - 1])) --end;
  bool first = true;
  size_t i = lead;
  while (i < end) {
    size_t j = i;
    while (j < end && line[j] != ' ') ++j;
    if (j > i) {
      if (!first) out += ' ';
      first = false;
      const std::string_view word = line.substr(i, j - i);
      auto it = cache.words.find(word);
      if (it != cache.words.end()) {
        out += it->second;
      } else if (word.size() > 256) {
        append_word(word, cache.scratch, out);  // long words are not worth caching
      } else {
        std::string segmented;
        append_word(word, cache.scratch, segmented);
        out += segmented;
        if (cache.words.size() >= kMaxCachedWords) cache.words.clear();  // bounded memory on endless input
        cache.words.emplace(std::string(word), std::move(segmented));
      }
    }
    i = j + 1;
  }
  out.append(line.data() + end, line.size() - end);
}

// The rest of a line whose earlier words were already written (streaming): it starts with the
// run of spaces that followed the last written word. That run becomes one space when another
// word follows, and is copied as it is (the line's trailing whitespace) when none does.
void SennrichBpe::Impl::apply_line_rest(std::string_view rest, Cache& cache, std::string& out) const {
  size_t lead = 0;
  while (lead < rest.size() && (rest[lead] == ' ' || rest[lead] == '\r' || rest[lead] == '\n')) ++lead;
  if (lead == rest.size()) {
    out.append(rest);
    return;
  }
  out += ' ';
  apply_line(rest.substr(lead), cache, out);
}

// Applies to whole lines of valid UTF-8, in parallel over chunks cut after a '\n' (a line end
// in both modes) when the text is large; caches[t] is thread t's word cache.
void SennrichBpe::Impl::apply_lines(std::string_view text, text::LineMode mode, std::vector<Cache>& caches,
                                    std::string& out) const {
  const int n_threads = text.size() < (1 << 20) ? 1 : std::max(1, omp_get_max_threads());
  if (caches.size() < static_cast<size_t>(n_threads)) caches.resize(static_cast<size_t>(n_threads));
  if (n_threads == 1) {
    out.reserve(out.size() + text.size() * 5 / 4);
    text::for_each_line(text, mode, [&](std::string_view line) { apply_line(line, caches[0], out); });
    return;
  }
  std::vector<size_t> cuts(static_cast<size_t>(n_threads) + 1, text.size());
  cuts[0] = 0;
  for (int t = 1; t < n_threads; ++t) {
    size_t c =
        std::max({cuts[t - 1], size_t{1}, text.size() * static_cast<size_t>(t) / static_cast<size_t>(n_threads)});
    while (c < text.size() && text[c - 1] != '\n') ++c;
    cuts[t] = c;
  }
  std::vector<std::string> outs(static_cast<size_t>(n_threads));
#pragma omp parallel for num_threads(n_threads) schedule(static, 1)
  for (int t = 0; t < n_threads; ++t) {
    std::string& o = outs[t];
    o.reserve((cuts[t + 1] - cuts[t]) * 5 / 4);
    text::for_each_line(text.substr(cuts[t], cuts[t + 1] - cuts[t]), mode,
                        [&](std::string_view line) { apply_line(line, caches[t], o); });
  }
  size_t total = out.size();
  for (const auto& o : outs) total += o.size();
  out.reserve(total);
  for (const auto& o : outs) out += o;
}

namespace {

// Where the first line of s ends (just after its terminator) under mode, or s.size() when it has
// no terminator in s.
size_t first_line_end(std::string_view s, text::LineMode mode) {
  for (size_t i = 0; i < s.size(); ++i) {
    if (mode == text::LineMode::kUniversal) {
      if (s[i] == '\n') return i + 1;
      if (s[i] == '\r') return i + 1 < s.size() && s[i + 1] == '\n' ? i + 2 : i + 1;
    } else if (const size_t b = text::splitlines_break_at(s, i); b > 0) {
      return i + b;
    }
  }
  return s.size();
}

// Just after the last line terminator in s under mode, or 0 when there is none. A '\r' at the
// very end must be excluded by the caller when more input may follow (it may be half of "\r\n").
size_t last_line_end(std::string_view s, text::LineMode mode) {
  for (size_t i = s.size(); i > 0; --i) {
    const auto c = static_cast<unsigned char>(s[i - 1]);
    if (c == '\n' || c == '\r') return i;
    if (mode == text::LineMode::kUniversal) continue;
    if (c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E)) return i;
    if (c == 0x85 && i >= 2 && static_cast<unsigned char>(s[i - 2]) == 0xC2) return i;
    if ((c == 0xA8 || c == 0xA9) && i >= 3 && static_cast<unsigned char>(s[i - 2]) == 0x80 &&
        static_cast<unsigned char>(s[i - 3]) == 0xE2)
      return i;
  }
  return 0;
}

}  // namespace

std::string SennrichBpe::apply_line(std::string_view line) const {
  Impl::Cache cache;
  std::string out;
  impl_->apply_line(line, cache, out);
  return out;
}

std::string SennrichBpe::apply_text(std::string_view text, text::LineMode mode, const std::string& name) const {
  if (auto bad = find_invalid_utf8(text)) fail_file(name, "{}: invalid UTF-8 at byte offset {}", name, *bad);
  std::vector<Impl::Cache> caches;
  std::string out;
  impl_->apply_lines(text, mode, caches, out);
  return out;
}

void SennrichBpe::apply_stream(const std::function<size_t(char*, size_t)>& read,
                               const std::function<void(std::string_view)>& write, text::LineMode mode,
                               const std::string& name, size_t block_size) const {
  block_size = std::max<size_t>(block_size, 1);
  std::vector<Impl::Cache> caches(1);
  std::string buffer;       // input not yet applied
  uint64_t base = 0;        // input offset of buffer[0]
  bool continuing = false;  // buffer[0] continues a line whose earlier words were written
  std::string out;
  auto check = [&](std::string_view part, size_t offset) {
    if (auto bad = find_invalid_utf8(part))
      fail_file(name, "{}: invalid UTF-8 at byte offset {}", name, base + offset + *bad);
  };
  for (bool eof = false; !eof;) {
    const size_t had = buffer.size();
    buffer.resize(had + block_size);
    const size_t got = read(buffer.data() + had, block_size);
    buffer.resize(had + got);
    eof = got == 0;
    const std::string_view buf(buffer);
    // A '\r' at the end may be the first half of "\r\n": it waits for the next block.
    const size_t limit = !eof && !buf.empty() && buf.back() == '\r' ? buf.size() - 1 : buf.size();
    size_t done = eof ? buf.size() : last_line_end(buf.substr(0, limit), mode);
    out.clear();
    if (done > 0) {
      // Whole lines; the first one may be the rest of a line begun in an earlier block.
      check(buf.substr(0, done), 0);
      size_t start = 0;
      if (continuing) {
        start = first_line_end(buf.substr(0, done), mode);
        text::for_each_line(buf.substr(0, start), mode,
                            [&](std::string_view rest) { impl_->apply_line_rest(rest, caches[0], out); });
        continuing = false;
      }
      impl_->apply_lines(buf.substr(start, done - start), mode, caches, out);
    }
    if (!eof) {
      // The unfinished line: apply it up to the end of its last complete word (a word followed by
      // a space); the rest, from that space on, waits for more input.
      size_t cut = limit;
      while (cut > done && !(buf[cut - 1] == ' ' && cut - 1 > done && buf[cut - 2] != ' ')) --cut;
      if (cut > done) {
        const std::string_view part = buf.substr(done, cut - 1 - done);
        check(part, done);
        if (continuing)
          impl_->apply_line_rest(part, caches[0], out);
        else
          impl_->apply_line(part, caches[0], out);
        continuing = true;
        done = cut - 1;
      }
    }
    if (!out.empty()) write(out);
    buffer.erase(0, done);
    base += done;
  }
}

}  // namespace tformer
