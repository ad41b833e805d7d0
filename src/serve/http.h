// A small HTTP/1.1 server over POSIX sockets, written for tformer serve: every limit explicit.
//
//   request line    at most max_request_line bytes                          else 414, closed
//   headers         at most max_header_bytes in all, at most max_headers      else 431, closed
//   body            Content-Length only (no chunked request bodies: 411),
//                   at most max_body bytes                                    else 413, closed
//   time            the request line and headers must arrive within header_timeout_ms and the
//                   body within body_timeout_ms of the end of the headers (a client sending a byte a
//                   second gets 408 and is closed); an idle keep-alive connection is closed after
//                   idle_timeout_ms; a write that cannot progress for write_timeout_ms drops the
//                   connection
//   connections     at most max_connections at once (one thread each); beyond it a new
//                   connection gets 503 at once and is closed
//
// Keep-alive is HTTP/1.1's default (Connection: close and HTTP/1.0 close after the response).
// "Expect: 100-continue" is answered before the body is read. A handler that throws gets a 500
// whose body is a fixed text: an exception's message never reaches a header.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace tformer::serve {

struct HttpLimits {
  size_t max_request_line = 8192;
  size_t max_header_bytes = 16384;
  size_t max_headers = 64;
  size_t max_body = 1 << 20;
  int header_timeout_ms = 10000;
  int body_timeout_ms = 30000;
  int idle_timeout_ms = 10000;
  int write_timeout_ms = 30000;
  int max_connections = 64;
};

struct HttpRequest {
  std::string method, target, path, version;
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  // The first header of that (lower-case) name, or empty.
  std::string header(std::string_view name) const;
};

// The request line and headers of one request, as HttpServer reads them off a connection: `head`
// is everything before the blank line ("\r\n\r\n") that ends them. Fills req's method, target,
// path, version and headers (names lower-cased, values trimmed). status 0: accepted, with the body's
// length (Content-Length, at most max_body) and whether the connection stays open after the
// response; otherwise the status the server answers before closing the connection (400 malformed,
// 411 a chunked body, 413 a body over max_body, 414 a request line over max_request_line, 431 too
// many or too long headers, 505 a version other than HTTP/1.0 and 1.1) and why.
struct HttpHead {
  int status = 0;
  std::string why;
  size_t content_length = 0;
  bool keep_alive = false;
};
HttpHead parse_http_head(std::string_view head, const HttpLimits& limits, HttpRequest& req);

// The handler's side of one response: either send() once, or start_stream() then write()s and
// end_stream(). A false return means the client has gone (the connection is then closed).
class HttpResponse {
 public:
  // http10: the client speaks HTTP/1.0, which has no chunked bodies: a stream is then the raw
  // bytes, ended by closing the connection.
  HttpResponse(int fd, const HttpLimits& limits, bool keep_alive, bool http10 = false)
      : fd_(fd), limits_(limits), keep_alive_(keep_alive && !http10), http10_(http10) {}
  bool send(int status, std::string_view content_type, std::string_view body,
            const std::vector<std::pair<std::string, std::string>>& headers = {});
  // A chunked response (text/event-stream for server-sent events).
  bool start_stream(int status, std::string_view content_type);
  bool write(std::string_view data);  // one chunk (empty data is skipped: it would end the body)
  bool end_stream();
  // Whether the client has closed its side or reset the connection (polls, does not block).
  bool client_gone() const;
  bool sent() const { return started_; }
  bool keep_alive() const { return keep_alive_ && !broken_; }

 private:
  bool write_all(std::string_view data);
  int fd_;
  const HttpLimits& limits_;
  bool keep_alive_, http10_;
  bool started_ = false, broken_ = false;
};

const char* http_status_text(int status);

class HttpServer {
 public:
  using Handler = std::function<void(const HttpRequest&, HttpResponse&)>;
  // Binds host:port (port 0: a free one) and listens; an Error names the address on failure.
  HttpServer(const std::string& host, int port, HttpLimits limits, Handler handler);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  // Accepts and serves until stop(); returns after every connection thread has ended.
  void run();
  // From any thread, or a signal handler (it writes one byte to a pipe).
  void stop();
  bool stopping() const { return stopping_; }

 private:
  void serve_connection(int fd);
  HttpLimits limits_;
  Handler handler_;
  int listen_fd_ = -1, wake_[2] = {-1, -1}, port_ = 0;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  int connections_ = 0;
};

}  // namespace tformer::serve
