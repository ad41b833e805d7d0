// The explorable page's files (web/: index.html, its style sheet and script modules), compiled into
// the binary when tformer is built (cmake/embed_web.cmake writes their bytes into a generated
// source file), so that `tformer serve` needs nothing else installed to show the page: GET / is
// web/index.html and GET /web/NAME is web/NAME.
#pragma once

#include <cstddef>
#include <string_view>

namespace tformer::serve {

struct WebAsset {
  std::string_view name;  // the path under web/, e.g. "index.html", "app.js"
  std::string_view content_type;
  std::string_view bytes;
};

// The asset at `name`, or null.
const WebAsset* find_web_asset(std::string_view name);

}  // namespace tformer::serve
