#include "server/api/request_images.h"

#include <fmt/format.h>
#include <boost/asio/ip/address.hpp>

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

// Why the server must not fetch from `address` on a client's behalf (empty: it may): this
// machine, its network and the cloud's metadata service are not the client's to reach.
std::string private_address(const std::string& text) {
  boost::system::error_code ec;
  boost::asio::ip::address a = boost::asio::ip::make_address(text, ec);
  if (ec) return "not an address";
  if (a.is_v6() && a.to_v6().is_v4_mapped())
    a = boost::asio::ip::make_address_v4(boost::asio::ip::v4_mapped, a.to_v6());
  if (a.is_unspecified() || a.is_loopback() || a.is_multicast())
    return "a loopback or local address";
  if (a.is_v4()) {
    const uint32_t v = a.to_v4().to_uint();
    auto in = [&](uint32_t net, int bits) { return (v >> (32 - bits)) == (net >> (32 - bits)); };
    if (in(0x0A000000, 8) || in(0xAC100000, 12) || in(0xC0A80000, 16))
      return "a private address (10/8, 172.16/12, 192.168/16)";
    if (in(0xA9FE0000, 16)) return "a link-local address (169.254/16)";
    if (in(0x64400000, 10)) return "a shared address (100.64/10)";
    if (in(0x00000000, 8) || v == 0xFFFFFFFF) return "a reserved address";
    return "";
  }
  const boost::asio::ip::address_v6 v6 = a.to_v6();
  if (v6.is_link_local() || v6.is_site_local()) return "a link-local address";
  if ((v6.to_bytes()[0] & 0xfe) == 0xfc) return "a unique local address (fc00::/7)";
  return "";
}

// An http(s) image, when the operator allowed them: one GET (redirects followed), the size cap
// checked on Content-Length and again while reading, 10 s without bytes a failure; hosts on
// this machine's networks refused unless the operator allowed those too.
DataUrl fetch_image(const std::string& ref, const ImageRequestLimits& limits,
                    const std::string& where) {
  const size_t cap = limits.decode.max_encoded_bytes;
  hub::ClientOptions o;
  o.connect_timeout = std::chrono::seconds(10);
  o.idle_timeout = std::chrono::seconds(10);
  o.user_agent = "waste/0.1";
  if (!limits.allow_private_hosts)
    o.refuse_address = [](const std::string& address) {
      std::string why = private_address(address);
      return why.empty() ? why
                         : fmt::format(
                               "it resolves to {}, which is not fetched "
                               "(--allow-private-image-hosts)",
                               why);
    };
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
    out.remote = true;
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
  for (const ImagePart& part : image_parts(r)) {
    const std::string& where = part.where;
    if (!enc)
      throw ApiError(400, fmt::format("{}: this model does not accept images", where), where,
                     "unsupported_content");
    if (part.role != Role::kUser)
      throw ApiError(400, fmt::format("{}: images are accepted only in user messages", where),
                     where, "unsupported_content");
    if (out.size() >= limits.max_images)
      throw ApiError(
          400, fmt::format("{}: more than {} images in one request", where, limits.max_images),
          where, "too_many_images");
    DataUrl url = image_bytes(part.ref, limits, where);
    DecodeLimits dl = limits.decode;
    // TGA has no magic number: with the option on, it is still taken only when declared.
    bool psd =
        url.bytes.size() >= 4 && std::string_view((const char*)url.bytes.data(), 4) == "8BPS";
    dl.allow_tga_psd = limits.decode.allow_tga_psd &&
                       (psd || url.mime == "image/x-tga" || url.mime == "image/tga");
    try {
      out.push_back(prepare_image(url.bytes, *enc, dl, where));
    } catch (const std::exception& e) {  // FormatError, UsageError, bad_alloc
      std::string why = server_words(e.what());
      // Bytes fetched from elsewhere are not the client's to see (they may be another
      // service's answer): say what failed, not what came.
      if (url.remote) why = why.substr(0, why.find(" (first bytes"));
      throw ApiError(400, fmt::format("{}: {}", where, why), where, kCode);
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
