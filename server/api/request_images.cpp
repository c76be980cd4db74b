#include "server/api/request_images.h"

#include <fmt/format.h>

#include "engine/base/error.h"
#include "protocol/api_error.h"
#include "protocol/data_url.h"
#include "server/hub/hub_client.h"

namespace waste {

namespace {

constexpr const char* kCode = "invalid_image";

bool starts_with_nocase(const std::string& s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); i++)
    if (std::tolower((unsigned char)s[i]) != prefix[i]) return false;
  return true;
}

// An http(s) image, when the operator allowed them: one GET (redirects followed), the size cap
// checked on Content-Length and again while reading, 10 s without bytes a failure.
DataUrl fetch_image(const std::string& ref, const ImageRequestLimits& limits,
                    const std::string& where) {
  const size_t cap = limits.decode.max_encoded_bytes;
  hub::ClientOptions o;
  o.connect_timeout = std::chrono::seconds(10);
  o.idle_timeout = std::chrono::seconds(10);
  o.user_agent = "waste/0.1";
  DataUrl out;
  hub::BodyHandler body;
  body.on_headers = [&](const hub::Response& r) {
    if (r.status != 200) return false;
    if (auto n = r.content_length(); n && *n > cap)
      fail<UsageError>("the image is {} bytes, more than the limit of {}", *n, cap);
    return true;
  };
  body.on_data = [&](const char* p, size_t n) {
    if (out.bytes.size() + n > cap)
      fail<UsageError>("the image is more than the limit of {} bytes", cap);
    out.bytes.insert(out.bytes.end(), p, p + n);
  };
  try {
    hub::HttpClient client(o);
    hub::Response r = client.request("GET", hub::parse_url(ref), {}, true, &body);
    if (r.status != 200) fail<UsageError>("the server answered HTTP {}", r.status);
    std::string type = r.header("content-type");
    out.mime = type.substr(0, type.find(';'));
    for (char& c : out.mime) c = (char)std::tolower((unsigned char)c);
  } catch (const std::exception& e) {
    throw ApiError(400, fmt::format("{}: fetching {} failed: {}", where, ref, e.what()), where,
                   "invalid_image_url");
  }
  return out;
}

// The payload of a data: URL (or, when allowed, of a remote URL), or a 400 saying why there is
// none.
DataUrl image_bytes(const std::string& ref, const ImageRequestLimits& limits,
                    const std::string& where) {
  if (starts_with_nocase(ref, "http://") || starts_with_nocase(ref, "https://")) {
    if (limits.allow_remote) return fetch_image(ref, limits, where);
    throw ApiError(400,
                   fmt::format("{}: remote image URLs are not accepted (--allow-remote-images is "
                               "off); send the image inline as a data: URL",
                               where),
                   where, "unsupported_image_url");
  }
  if (!is_data_url(ref))
    throw ApiError(
        400, fmt::format("{}: the image must be a data: URL (data:image/png;base64,...)", where),
        where, "unsupported_image_url");
  try {
    return parse_data_url(ref, limits.decode.max_encoded_bytes);
  } catch (const UsageError& e) {
    throw ApiError(400, fmt::format("{}: bad image data URL: {}", where, e.what()), where, kCode);
  }
}

// The decoder names its own option; a client needs the server's.
std::string server_words(std::string msg) {
  const std::string engine = "(DecodeLimits::allow_tga_psd)";
  if (size_t at = msg.find(engine); at != std::string::npos)
    msg.replace(at, engine.size(),
                "on this server (--allow-tga-psd; a TGA must also be sent as image/x-tga)");
  return msg;
}

}  // namespace

std::vector<PromptImage> request_images(const Conversation& r, const ImageEncoder* enc,
                                        const ImageRequestLimits& limits) {
  std::vector<PromptImage> out;
  for (size_t i = 0; i < r.messages.size(); i++) {
    const auto* parts = std::get_if<std::vector<ContentPart>>(&r.messages[i].content);
    if (!parts) continue;
    for (size_t j = 0; j < parts->size(); j++) {
      if ((*parts)[j].kind != ContentPart::Kind::kImage) continue;
      std::string where = fmt::format("messages[{}].content[{}]", i, j);
      if (!enc)
        throw ApiError(400, fmt::format("{}: this model does not accept images", where), where,
                       "unsupported_content");
      if (r.messages[i].role != Role::kUser)
        throw ApiError(400, fmt::format("{}: images are accepted only in user messages", where),
                       where, "unsupported_content");
      if (out.size() >= limits.max_images)
        throw ApiError(
            400, fmt::format("{}: more than {} images in one request", where, limits.max_images),
            where, "too_many_images");
      DataUrl url = image_bytes((*parts)[j].image_ref, limits, where);
      DecodeLimits dl = limits.decode;
      // TGA has no magic number: with the option on, it is still taken only when declared.
      bool psd =
          url.bytes.size() >= 4 && std::string_view((const char*)url.bytes.data(), 4) == "8BPS";
      dl.allow_tga_psd = limits.decode.allow_tga_psd &&
                         (psd || url.mime == "image/x-tga" || url.mime == "image/tga");
      try {
        out.push_back(prepare_image(url.bytes, *enc, dl, where));
      } catch (const std::exception& e) {  // FormatError, UsageError, bad_alloc
        throw ApiError(400, fmt::format("{}: {}", where, server_words(e.what())), where, kCode);
      }
    }
  }
  return out;
}

void check_image_room(const std::vector<PromptImage>& images, int64_t ctx) {
  for (const PromptImage& im : images) {
    int64_t end = (int64_t)im.offset + im.pixels->tokens;
    if (end >= ctx)
      throw ApiError(400,
                     fmt::format("{}: the image takes {} positions from position {}, past this "
                                 "model's context of {} (smaller or fewer images fit)",
                                 im.where, im.pixels->tokens, im.offset, ctx),
                     im.where, "context_length_exceeded");
  }
}

}  // namespace waste
