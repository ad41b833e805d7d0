// libFuzzer target: the HTTP/1.1 request parser of tformer serve (serve/http.h, parse_http_head:
// the request line, the headers, Connection, Transfer-Encoding and Content-Length). The input is
// the bytes a client sends on a connection; as HttpServer does, the head is what comes before the
// first blank line ("\r\n\r\n"; an input without one is a request still arriving, and is skipped),
// parsed under the server's default limits and under tight ones (64-byte request line, 128 bytes
// and 4 headers, 16-byte body) that the seeds can exceed. A refusal must be one of the statuses the
// server answers; an accepted head must have a method, a target starting with '/' whose path part
// is its prefix up to '?', HTTP/1.0 or 1.1, lower-case header names without ':', space or tab, and a
// body length within the limit.
#include <cstdlib>
#include <string_view>

#include "serve/http.h"

namespace {

void check(std::string_view head, const tformer::serve::HttpLimits& limits) {
  tformer::serve::HttpRequest req;
  const tformer::serve::HttpHead h = tformer::serve::parse_http_head(head, limits, req);
  switch (h.status) {
    case 0:
      break;
    case 400:
    case 411:
    case 413:
    case 414:
    case 431:
    case 505:
      if (h.why.empty()) std::abort();
      return;
    default:
      std::abort();
  }
  if (req.method.empty() || req.target.empty() || req.target[0] != '/') std::abort();
  if (req.target.compare(0, req.path.size(), req.path) != 0 || req.path.find('?') != std::string::npos) std::abort();
  if (req.version != "HTTP/1.1" && req.version != "HTTP/1.0") std::abort();
  if (req.headers.size() > limits.max_headers || h.content_length > limits.max_body) std::abort();
  for (const auto& [name, value] : req.headers) {
    if (name.empty() || name.find_first_of(": \t") != std::string::npos) std::abort();
    for (const char c : name)
      if (c >= 'A' && c <= 'Z') std::abort();
    if (!value.empty() && (value.front() == ' ' || value.back() == '\t')) std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t end = input.find("\r\n\r\n");
  if (end == std::string_view::npos) return 0;
  check(input.substr(0, end), tformer::serve::HttpLimits{});
  tformer::serve::HttpLimits tight;
  tight.max_request_line = 64;
  tight.max_header_bytes = 128;
  tight.max_headers = 4;
  tight.max_body = 16;
  check(input.substr(0, end), tight);
  return 0;
}
