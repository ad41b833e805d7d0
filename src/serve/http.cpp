#include "serve/http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"

namespace tformer::serve {

namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::max<int64_t>(0, left));
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string error_json(int status, std::string_view message) {
  // (The HTTP layer's own refusals: a 503 is too many connections, the rest the request's fault.)
  nlohmann::json j = {
      {"error",
       {{"message", message}, {"type", status == 503 ? "server_busy" : "invalid_request_error"}, {"code", status}}}};
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace

std::string HttpRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return {};
}

const char* http_status_text(int status) {
  switch (status) {
    case 100:
      return "Continue";
    case 200:
      return "OK";
    case 204:
      return "No Content";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 411:
      return "Length Required";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 503:
      return "Service Unavailable";
    case 505:
      return "HTTP Version Not Supported";
    default:
      return "Unknown";
  }
}

bool HttpResponse::write_all(std::string_view data) {
  if (broken_) return false;
  const auto deadline = Clock::now() + std::chrono::milliseconds(limits_.write_timeout_ms);
  while (!data.empty()) {
    const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd_, POLLOUT, 0};
      const int left = ms_left(deadline);
      if (left > 0 && ::poll(&p, 1, left) > 0 && !(p.revents & (POLLERR | POLLHUP))) continue;
    }
    broken_ = true;  // gone, reset, or not reading
    return false;
  }
  return true;
}

bool HttpResponse::send(int status, std::string_view content_type, std::string_view body,
                        const std::vector<std::pair<std::string, std::string>>& headers) {
  started_ = true;
  std::string head = fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n", status,
                                 http_status_text(status), content_type, body.size());
  for (const auto& [k, v] : headers) head += fmt::format("{}: {}\r\n", k, v);
  head += keep_alive_ ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  if (!write_all(head)) return false;
  return write_all(body);
}

bool HttpResponse::start_stream(int status, std::string_view content_type) {
  started_ = true;
  if (http10_)
    return write_all(
        fmt::format("HTTP/1.1 {} {}\r\nContent-Type: {}\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n",
                    status, http_status_text(status), content_type));
  const std::string head = fmt::format(
      "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nCache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n{}\r\n", status,
      http_status_text(status), content_type, keep_alive_ ? "Connection: keep-alive\r\n" : "Connection: close\r\n");
  return write_all(head);
}

bool HttpResponse::write(std::string_view data) {
  if (data.empty()) return !broken_;
  if (http10_) return write_all(data);
  return write_all(fmt::format("{:x}\r\n{}\r\n", data.size(), data));
}

bool HttpResponse::end_stream() { return http10_ ? !broken_ : write_all("0\r\n\r\n"); }

bool HttpResponse::client_gone() const {
  if (broken_) return true;
  pollfd p{fd_, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLERR | POLLHUP | POLLRDHUP | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

HttpServer::HttpServer(const std::string& host, int port, HttpLimits limits, Handler handler)
    : limits_(limits), handler_(std::move(handler)) {
  if (port < 0 || port > 65535) fail_input("--port", "--port must be in 0..65535, got {}", port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); rc != 0)
    fail_input("--host", "--host {}: {}", host, gai_strerror(rc));
  std::string why;
  for (addrinfo* a = res; a; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) == 0 && ::listen(fd, 128) == 0) {
      listen_fd_ = fd;
      sockaddr_storage ss{};
      socklen_t len = sizeof ss;
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
      port_ = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                             : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
      break;
    }
    why = std::strerror(errno);
    ::close(fd);
  }
  ::freeaddrinfo(res);
  if (listen_fd_ < 0) fail_input("--port", "cannot listen on {}:{}: {}", host, port, why);
  if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) {
    ::close(listen_fd_);
    fail_input("--port", "cannot make the server's wake-up pipe: {}", std::strerror(errno));
  }
}

HttpServer::~HttpServer() {
  if (listen_fd_ >= 0) ::close(listen_fd_);
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
}

void HttpServer::stop() {
  stopping_ = true;
  const char c = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_[1], &c, 1);  // async-signal-safe
}

void HttpServer::run() {
  while (!stopping_) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (p[1].revents || stopping_) break;
    if (!(p[0].revents & POLLIN)) continue;
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    {
      std::lock_guard lock(mu_);
      if (connections_ >= limits_.max_connections) {
        HttpResponse r(fd, limits_, false);
        r.send(503, "application/json", error_json(503, "too many connections; try again later"));
        ::close(fd);
        continue;
      }
      ++connections_;
    }
    std::thread([this, fd] {
      try {
        serve_connection(fd);
      } catch (...) {}
      ::close(fd);
      std::lock_guard lock(mu_);
      --connections_;
      cv_.notify_all();
    }).detach();
  }
  ::close(listen_fd_);
  listen_fd_ = -1;
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return connections_ == 0; });
}

HttpHead parse_http_head(std::string_view head, const HttpLimits& limits, HttpRequest& req) {
  HttpHead out;
  auto refuse = [&](int status, std::string why) {
    out.status = status;
    out.why = std::move(why);
    return out;
  };
  const size_t line_end = head.find("\r\n");
  const std::string_view line = head.substr(0, line_end);
  if (line.size() > limits.max_request_line)
    return refuse(414, fmt::format("the request line is longer than {} bytes", limits.max_request_line));
  if (head.size() - line.size() > limits.max_header_bytes)
    return refuse(431, fmt::format("the headers are longer than {} bytes", limits.max_header_bytes));
  {
    const size_t s1 = line.find(' '), s2 = s1 == std::string_view::npos ? s1 : line.find(' ', s1 + 1);
    // An empty method (the line starts with a space) is as malformed as a missing part.
    if (s1 == std::string_view::npos || s1 == 0 || s2 == std::string_view::npos ||
        line.find(' ', s2 + 1) != std::string::npos)
      return refuse(400, "malformed request line (expected METHOD TARGET HTTP/1.x)");
    req.method = std::string(line.substr(0, s1));
    req.target = std::string(line.substr(s1 + 1, s2 - s1 - 1));
    req.version = std::string(line.substr(s2 + 1));
    if (req.version != "HTTP/1.1" && req.version != "HTTP/1.0") return refuse(505, "only HTTP/1.0 and 1.1");
    if (req.target.empty() || req.target[0] != '/') return refuse(400, "the request target must start with /");
    req.path = req.target.substr(0, req.target.find('?'));
  }
  size_t pos = line_end == std::string_view::npos ? head.size() : line_end + 2;
  while (pos < head.size()) {
    size_t e = head.find("\r\n", pos);
    if (e == std::string_view::npos) e = head.size();
    const std::string_view h = head.substr(pos, e - pos);
    pos = e + 2;
    const size_t colon = h.find(':');
    if (colon == std::string_view::npos || colon == 0 || h.find_first_of(" \t") < colon)
      return refuse(400, "malformed header line");
    if (req.headers.size() >= limits.max_headers)
      return refuse(431, fmt::format("more than {} headers", limits.max_headers));
    req.headers.emplace_back(lower(h.substr(0, colon)), std::string(trim(h.substr(colon + 1))));
  }
  const std::string connection = lower(req.header("connection"));
  const bool keep_alive = req.version == "HTTP/1.1" ? connection != "close" : connection == "keep-alive";
  if (!req.header("transfer-encoding").empty())
    return refuse(411, "chunked request bodies are not accepted; send Content-Length");
  size_t length = 0;
  if (const std::string cl = req.header("content-length"); !cl.empty()) {
    if (cl.size() > 18 || !std::all_of(cl.begin(), cl.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return refuse(400, "Content-Length is not a number");
    length = std::stoull(cl);
    if (length > limits.max_body)
      return refuse(413, fmt::format("the body is {} bytes; the limit is {}", length, limits.max_body));
  }
  out.keep_alive = keep_alive;
  out.content_length = length;
  return out;
}

void HttpServer::serve_connection(int fd) {
  std::string buf;
  char chunk[16384];
  // Reads more bytes into buf before `deadline`; false on close, error, timeout or shutdown (a
  // request not yet read whole is dropped at shutdown; one being answered is finished).
  auto read_more = [&](Clock::time_point deadline, bool* timed_out) {
    for (;;) {
      const int left = ms_left(deadline);
      if (left == 0) {
        *timed_out = true;
        return false;
      }
      if (stopping_) return false;
      pollfd p{fd, POLLIN, 0};
      const int rc = ::poll(&p, 1, std::min(left, 200));
      if (rc < 0 && errno != EINTR) return false;
      if (rc <= 0) continue;
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      buf.append(chunk, static_cast<size_t>(n));
      return true;
    }
  };
  // The error, then a lingering close: our side is shut for writing and what the client is still
  // sending (a body over the limit) is read and dropped for up to a second, so that closing with
  // unread bytes does not reset the connection before the client has read the answer.
  auto refuse = [&](int status, std::string_view message) {
    HttpResponse r(fd, limits_, false);
    if (!r.send(status, "application/json", error_json(status, message))) return;
    ::shutdown(fd, SHUT_WR);
    const auto until = Clock::now() + std::chrono::seconds(1);
    for (size_t drained = 0; drained < (size_t{16} << 20);) {
      pollfd p{fd, POLLIN, 0};
      const int left = ms_left(until);
      if (left == 0 || ::poll(&p, 1, left) <= 0) return;
      const ssize_t n = ::recv(fd, chunk, sizeof chunk, 0);
      if (n <= 0) return;
      drained += static_cast<size_t>(n);
    }
  };
  for (;;) {
    // The request line and headers.
    bool timed_out = false;
    auto deadline = Clock::now() + std::chrono::milliseconds(limits_.idle_timeout_ms);
    bool started = !buf.empty();
    if (started) deadline = Clock::now() + std::chrono::milliseconds(limits_.header_timeout_ms);
    size_t head_end = std::string::npos;
    while ((head_end = buf.find("\r\n\r\n")) == std::string::npos) {
      const size_t line_end = buf.find("\r\n");
      if ((line_end == std::string::npos ? buf.size() : line_end) > limits_.max_request_line)
        return refuse(414, fmt::format("the request line is longer than {} bytes", limits_.max_request_line));
      if (buf.size() > limits_.max_request_line + limits_.max_header_bytes)
        return refuse(431, fmt::format("the headers are longer than {} bytes", limits_.max_header_bytes));
      if (!read_more(deadline, &timed_out)) {
        if (timed_out && started) refuse(408, "the request did not arrive in time");
        return;
      }
      if (!started) {
        started = true;
        deadline = Clock::now() + std::chrono::milliseconds(limits_.header_timeout_ms);
      }
    }
    const auto body_deadline = Clock::now() + std::chrono::milliseconds(limits_.body_timeout_ms);
    HttpRequest req;
    const HttpHead h = parse_http_head(std::string_view(buf.data(), head_end), limits_, req);
    if (h.status != 0) return refuse(h.status, h.why);
    buf.erase(0, head_end + 4);
    const bool keep_alive = h.keep_alive;
    const size_t length = h.content_length;
    if (length > buf.size() && lower(req.header("expect")) == "100-continue") {
      static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      if (::send(fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(kContinue.size()))
        return;
    }
    while (buf.size() < length) {
      if (!read_more(body_deadline, &timed_out)) {
        if (timed_out) refuse(408, "the body did not arrive in time");
        return;
      }
    }
    req.body = buf.substr(0, length);
    buf.erase(0, length);
    HttpResponse res(fd, limits_, keep_alive && !stopping_, req.version == "HTTP/1.0");
    try {
      handler_(req, res);
    } catch (...) {
      if (!res.sent()) res.send(500, "application/json", error_json(500, "internal error"));
      return;
    }
    if (!res.sent()) res.send(500, "application/json", error_json(500, "the handler sent no response"));
    if (!res.keep_alive()) return;
  }
}

}  // namespace tformer::serve
