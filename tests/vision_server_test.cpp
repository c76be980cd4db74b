// Images through the daemon: image_url parts with data: URLs answered on a synthetic K3 tiny
// container (with its small tower), prefix reuse keyed by image content, and a clear 400 naming
// the part for every bad image, with the daemon still healthy afterwards.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <simdjson.h>

#include <filesystem>
#include <list>
#include <thread>

#include "engine/synth/synth.h"
#include "tests/http_client.h"
#include "tests/png_util.h"
#include "tests/test_util.h"

namespace waste {
namespace {

namespace fs = std::filesystem;
using test::Daemon;
using test::http_request;
using test::HttpResponse;

class VisionServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new test::TempDir();
    write_synthetic(dir_->path() / "k3.waste", {Arch::kK3, "tiny", 5});
    write_synthetic(dir_->path() / "kl.waste", {Arch::kKimiLinear, "tiny", 5});
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string k3() { return (dir_->path() / "k3.waste").string(); }
  static std::string kl() { return (dir_->path() / "kl.waste").string(); }

  static std::unique_ptr<Daemon> start(std::vector<std::string> args) {
    return test::start_daemon(std::move(args));
  }

  // A user message whose content is an image part (url) then a text part.
  static std::string request(const std::string& url, const std::string& role = "user",
                             const std::string& extra = "") {
    return R"({"messages":[)" + extra + R"({"role":")" + role +
           R"(","content":[{"type":"text","text":"look"},{"type":"image_url","image_url":{"url":")" +
           url + R"("}}]}],"max_tokens":4,"temperature":0,"thinking":{"type":"disabled"}})";
  }

  simdjson::dom::element parse(const std::string& s) {
    docs_.emplace_back(s);
    return parser_.emplace_back().parse(docs_.back()).value();
  }

  static test::TempDir* dir_;
  std::list<simdjson::padded_string> docs_;
  std::list<simdjson::dom::parser> parser_;
};
test::TempDir* VisionServerTest::dir_ = nullptr;

// `waste render MODEL` builds the daemon's prompt for an image request: the media block names
// the size, its pad is widened to the image's positions, and the ids are as many as the daemon
// counts; without a model that sizes images it says what is missing.
TEST_F(VisionServerTest, RenderBuildsTheDaemonsMediaBlock) {
  test::TempDir t;
  const std::string body = request(test::png_data_url(100, 60, 1));
  test::write_file(t / "req.json", body);
  std::string out;
  const std::string waste = test::waste_binary().string();
  ASSERT_EQ(test::run_command(waste + " render " + k3() + " < " + (t / "req.json").string(), &out),
            0)
      << out;
  auto r = parse(out);
  EXPECT_NE(simdjson::minify(r["segments"]).find("image 100x60"), std::string::npos) << out;
  const int64_t positions = int64_t(r["images"].at(0)["positions"]);
  EXPECT_GT(positions, 1);
  auto d = start({k3()});
  HttpResponse h = http_request(d->port(), "POST", "/v1/chat/completions", body);
  ASSERT_EQ(h.status, 200) << h.body;
  EXPECT_EQ((int64_t)r["token_ids"].get_array().size(),
            int64_t(parse(h.body)["usage"]["prompt_tokens"]));
  for (const std::string& other :
       {" render " + kl(), " render --tokenizer " + k3() + "/tokenizer.model"}) {
    EXPECT_NE(test::run_command(waste + other + " < " + (t / "req.json").string() + " 2>&1", &out),
              0);
    EXPECT_TRUE(out.find("image") != std::string::npos) << out;
  }
}

TEST_F(VisionServerTest, ImagePartsAreAnsweredAndSnapshotsAreKeyedByImage) {
  auto d = start({k3()});
  const std::string a = test::png_data_url(100, 60, 1), b = test::png_data_url(100, 60, 2);
  HttpResponse text = http_request(
      d->port(), "POST", "/v1/chat/completions",
      R"({"messages":[{"role":"user","content":"look"}],"max_tokens":4,"thinking":{"type":"disabled"}})");
  ASSERT_EQ(text.status, 200) << text.body;
  int64_t text_tokens = parse(text.body)["usage"]["prompt_tokens"];

  HttpResponse r1 = http_request(d->port(), "POST", "/v1/chat/completions", request(a));
  ASSERT_EQ(r1.status, 200) << r1.body << d->log();
  auto j1 = parse(r1.body);
  EXPECT_EQ(int64_t(j1["usage"]["completion_tokens"]), 4);
  // 100x60: 12 image positions, plus <|media_begin|>image 100x60<|media_content|>...<|media_end|>.
  int64_t prompt = j1["usage"]["prompt_tokens"];
  EXPECT_GE(prompt, text_tokens + 12 + 3);

  // The same request again: the snapshot taken after the user message covers the image.
  HttpResponse r2 = http_request(d->port(), "POST", "/v1/chat/completions", request(a));
  ASSERT_EQ(r2.status, 200) << r2.body;
  auto j2 = parse(r2.body);
  const int64_t reused = j2["usage"]["prompt_tokens_details"]["cached_tokens"];
  EXPECT_GT(reused, 12 + 3);
  EXPECT_EQ(std::string_view(j2["choices"].at(0)["message"]["content"]),
            std::string_view(j1["choices"].at(0)["message"]["content"]));

  // Another image of the same size: same token ids, but the snapshot is not reused past the
  // image's first position.
  HttpResponse r3 = http_request(d->port(), "POST", "/v1/chat/completions", request(b));
  ASSERT_EQ(r3.status, 200) << r3.body;
  auto j3 = parse(r3.body);
  EXPECT_EQ(int64_t(j3["usage"]["prompt_tokens"]), prompt);
  // The image ends a few markup tokens before the snapshot point, so a reuse that stops before
  // the image stops at least its 12 positions earlier.
  EXPECT_LE(int64_t(j3["usage"]["prompt_tokens_details"]["cached_tokens"]), reused - 13);
  EXPECT_NE(d->log().find("images: accepted"), std::string::npos) << d->log();
}

TEST_F(VisionServerTest, BadImagesGetA400NamingThePart) {
  auto d = start({k3(), "--max-image-bytes", "2K", "--ctx", "128"});
  const std::string small = test::png_data_url(20, 20, 3);
  std::string truncated = test::png_rgb(20, 20, 3);
  truncated.resize(truncated.size() / 2);
  struct Case {
    std::string body;
    const char* fragment;
    const char* where = "messages[0].content[1]";
  };
  const Case cases[] = {
      {request("data:image/png;base64,iVBO*w0K"), "is not base64"},
      {request("data:image/png;base64,iVBORw0KGgo"), "multiple of 4"},
      {request("data:image/png," + std::string(10, 'x')), "not base64-encoded"},
      {request(test::png_data_url(60, 60, 4)), "more than the limit of 2048"},
      {request("data:image/webp;base64," + test::base64(std::string("RIFF\0\0\0\0WEBPVP8 ", 16))),
       "WebP is not supported"},
      {request("data:image/png;base64," + test::base64(truncated)), "PNG"},
      {request("data:image/png;base64,"), "empty"},
      {request("https://example.com/cat.png"), "remote image URLs are not accepted"},
      {request("file:///etc/passwd"), "must be a data: URL"},
      {request(small, "assistant", R"({"role":"user","content":"hi"},)"), "only in user messages",
       "messages[1].content[1]"},
  };
  for (const Case& k : cases) {
    HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", k.body);
    EXPECT_EQ(r.status, 400) << k.body.substr(0, 120) << " -> " << r.body;
    EXPECT_NE(r.body.find(k.fragment), std::string::npos) << k.fragment << " in " << r.body;
    EXPECT_NE(r.body.find(std::string("\"param\":\"") + k.where + "\""), std::string::npos)
        << r.body;
  }
  // Positions past the context: named too.
  auto tight = start({k3(), "--ctx", "64"});
  HttpResponse big = http_request(tight->port(), "POST", "/v1/chat/completions",
                                  request(test::png_data_url(300, 300, 6)));
  EXPECT_EQ(big.status, 400) << big.body;
  EXPECT_NE(big.body.find("context_length_exceeded"), std::string::npos) << big.body;
  EXPECT_NE(big.body.find("messages[0].content[1]"), std::string::npos) << big.body;
  // Still serving, images included.
  EXPECT_EQ(http_request(d->port(), "GET", "/health").status, 200);
  HttpResponse ok = http_request(d->port(), "POST", "/v1/chat/completions", request(small));
  EXPECT_EQ(ok.status, 200) << ok.body;
}

// Serves each connection one canned HTTP response on 127.0.0.1, from a thread.
class OneShotServer {
 public:
  explicit OneShotServer(std::vector<std::string> responses) : responses_(std::move(responses)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    EXPECT_EQ(::bind(fd_, (sockaddr*)&a, sizeof a), 0);
    EXPECT_EQ(::listen(fd_, 8), 0);
    ::getsockname(fd_, (sockaddr*)&a, &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      for (const std::string& response : responses_) {
        int c = ::accept(fd_, nullptr, nullptr);
        if (c < 0) return;
        std::string request;
        char buf[4096];
        while (request.find("\r\n\r\n") == std::string::npos) {
          ssize_t n = ::recv(c, buf, sizeof buf, 0);
          if (n <= 0) break;
          request.append(buf, (size_t)n);
        }
        for (size_t at = 0; at < response.size();) {
          ssize_t n = ::send(c, response.data() + at, response.size() - at, MSG_NOSIGNAL);
          if (n <= 0) break;
          at += (size_t)n;
        }
        ::close(c);
      }
    });
  }
  ~OneShotServer() {
    ::shutdown(fd_, SHUT_RDWR);
    ::close(fd_);
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return "http://127.0.0.1:" + std::to_string(port_) + path;
  }

 private:
  std::vector<std::string> responses_;
  int fd_ = -1;
  int port_ = 0;
  std::thread thread_;
};

std::string http_response(const std::string& status, const std::string& body) {
  return "HTTP/1.1 " + status +
         "\r\nContent-Type: image/png\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

TEST_F(VisionServerTest, RemoteImagesAreFetchedOnlyWhenAllowed) {
  const std::string png = test::png_rgb(40, 30, 9);
  const std::string secret = "<html>internal admin page: token=hunter2</html>";
  OneShotServer server({http_response("200 OK", png), http_response("404 Not Found", "gone"),
                        http_response("200 OK", std::string(5000, 'x')),
                        http_response("200 OK", secret)});
  // Loopback, link-local and private hosts are this machine's and its network's, not the
  // client's: refused unless the operator says otherwise, before any connection is made.
  {
    auto d = start({k3(), "--allow-remote-images", "true"});
    for (const std::string& url : {server.url("/cat.png"), std::string("http://10.1.2.3/x.png"),
                                   std::string("http://169.254.169.254/latest/meta-data"),
                                   std::string("http://[::1]:9/x.png")}) {
      HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", request(url));
      EXPECT_EQ(r.status, 400) << url << ": " << r.body;
      EXPECT_NE(r.body.find("--allow-private-image-hosts"), std::string::npos) << r.body;
    }
  }
  auto d = start({k3(), "--allow-remote-images", "true", "--allow-private-image-hosts", "true",
                  "--max-image-bytes", "4K"});
  HttpResponse ok =
      http_request(d->port(), "POST", "/v1/chat/completions", request(server.url("/cat.png")));
  EXPECT_EQ(ok.status, 200) << ok.body;
  HttpResponse missing =
      http_request(d->port(), "POST", "/v1/chat/completions", request(server.url("/gone.png")));
  EXPECT_EQ(missing.status, 400);
  EXPECT_NE(missing.body.find("HTTP 404"), std::string::npos) << missing.body;
  HttpResponse big =
      http_request(d->port(), "POST", "/v1/chat/completions", request(server.url("/big.png")));
  EXPECT_EQ(big.status, 400);
  EXPECT_NE(big.body.find("more than the limit of 4096"), std::string::npos) << big.body;
  // What another service answered is not echoed back, not even as hex.
  HttpResponse page =
      http_request(d->port(), "POST", "/v1/chat/completions", request(server.url("/admin")));
  EXPECT_EQ(page.status, 400);
  EXPECT_NE(page.body.find("unknown image format"), std::string::npos) << page.body;
  EXPECT_EQ(page.body.find("first bytes"), std::string::npos) << page.body;
  EXPECT_EQ(page.body.find("3c 68 74"), std::string::npos) << page.body;  // "<ht"
}

TEST_F(VisionServerTest, ModelsWithoutVisionRefuseImages) {
  test::TempDir t;
  fs::copy(k3(), t / "k3", fs::copy_options::recursive);
  fs::remove(t / "k3" / "vision.json");
  const std::string body = request(test::png_data_url(20, 20, 7));
  for (const std::string& model : {(t / "k3").string(), kl()}) {
    auto d = start({model});
    HttpResponse r = http_request(d->port(), "POST", "/v1/chat/completions", body);
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find("this model does not accept images"), std::string::npos) << r.body;
    EXPECT_NE(r.body.find("messages[0].content[1]"), std::string::npos) << r.body;
  }
}

TEST_F(VisionServerTest, TgaAndPsdOnlyBehindTheirOption) {
  // A 2x2 uncompressed true-colour TGA.
  std::string tga("\0\0\2\0\0\0\0\0\0\0\0\0\2\0\2\0\x18\x20", 18);
  tga += std::string(12, '\x7f');
  const std::string body = request("data:image/x-tga;base64," + test::base64(tga));
  auto off = start({k3()});
  HttpResponse r = http_request(off->port(), "POST", "/v1/chat/completions", body);
  EXPECT_EQ(r.status, 400) << r.body;
  EXPECT_NE(r.body.find("--allow-tga-psd"), std::string::npos) << r.body;
  auto on = start({k3(), "--allow-tga-psd", "true"});
  HttpResponse ok = http_request(on->port(), "POST", "/v1/chat/completions", body);
  EXPECT_EQ(ok.status, 200) << ok.body;
}

}  // namespace
}  // namespace waste
