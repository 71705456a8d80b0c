// LRA readers (data/lra.h): the task table, each reader on the committed fixtures
// (tests/fixtures/lra, written by tools/make_lra_fixtures.py: exact tokens and labels), the split
// rules, truncation, and the errors for malformed input (naming the file and line or record).
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/lra.h"
#include "tests/temp_dir.h"

using namespace hh;
using namespace hh::data;

namespace {

const std::string kLra = std::string(HH_SOURCE_DIR) + "/tests/fixtures/lra/";

using TempDir = test::TempDir;

std::vector<int32_t> bytes_plus_one(const std::string& s) {
  std::vector<int32_t> out;
  for (unsigned char c : s) out.push_back(static_cast<int32_t>(c) + 1);
  return out;
}

// ListOps ids of a space-separated symbol list ("[MAX 2 9 ]").
std::vector<int32_t> listops_ids(const std::string& symbols) {
  const auto& vocab = lra_listops_vocab();
  std::vector<int32_t> out;
  size_t pos = 0;
  while (pos < symbols.size()) {
    size_t end = symbols.find(' ', pos);
    if (end == std::string::npos) end = symbols.size();
    const std::string sym = symbols.substr(pos, end - pos);
    int32_t id = 0;
    for (size_t i = 0; i < vocab.size(); ++i)
      if (vocab[i] == sym) id = static_cast<int32_t>(i) + 1;
    REQUIRE_MESSAGE(id != 0, sym);
    out.push_back(id);
    pos = end + 1;
  }
  return out;
}

// The error message of read_lra_split, or "" when it does not throw.
std::string error_of(LraTask task, const std::string& dir, const std::string& split, int64_t max_len = 0) {
  try {
    read_lra_split(task, dir, split, max_len);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A 32x32 grey PNG (or any side) written by hand: stored (uncompressed) deflate blocks.
std::string grey_png(int side, uint8_t value);

}  // namespace

TEST_CASE("lra: task table and names") {
  CHECK(parse_lra_task("listops") == LraTask::listops);
  CHECK(parse_lra_task("pathfinder") == LraTask::pathfinder);
  for (LraTask t : {LraTask::listops, LraTask::text, LraTask::retrieval, LraTask::image, LraTask::pathfinder})
    CHECK(parse_lra_task(lra_task_name(t)) == t);
  try {
    parse_lra_task("cifar");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(contains(e.what(), "'cifar'"));
    CHECK(contains(e.what(), "listops, text, retrieval, image, pathfinder"));
  }
  CHECK(lra_task_info(LraTask::listops).max_len == 2000);
  CHECK(lra_task_info(LraTask::listops).num_classes == 10);
  CHECK(lra_task_info(LraTask::listops).vocab_size == 1 + static_cast<int64_t>(lra_listops_vocab().size()));
  CHECK(lra_task_info(LraTask::text).max_len == 4000);
  CHECK(lra_task_info(LraTask::retrieval).max_len == 4000);
  CHECK(lra_task_info(LraTask::retrieval).two_documents);
  CHECK(!lra_task_info(LraTask::text).two_documents);
  CHECK(lra_task_info(LraTask::image).max_len == 1024);
  CHECK(lra_task_info(LraTask::image).vocab_size == 257);
  CHECK(lra_task_info(LraTask::pathfinder).max_len == 1024);
  CHECK(lra_task_info(LraTask::pathfinder).num_classes == 2);
  CHECK(lra_listops_vocab().size() == 15);
  CHECK(lra_listops_vocab()[0] == "[MAX");
  CHECK(lra_listops_vocab()[4] == "]");
  CHECK(lra_listops_vocab()[5] == "0");
}

TEST_CASE("lra: ListOps fixture, parentheses dropped, labels, truncation") {
  const LraSplit train = read_lra_split(LraTask::listops, kLra + "listops", "train");
  CHECK(train.task == LraTask::listops);
  REQUIRE(train.examples.size() == 3);
  CHECK(train.examples[0].tokens == listops_ids("[MAX 2 9 ]"));
  CHECK(train.examples[0].label == 9);
  CHECK(train.examples[1].tokens == listops_ids("[SM 3 [MIN 4 7 ] 8 ]"));
  CHECK(train.examples[1].label == 5);
  CHECK(train.examples[2].label == 3);
  CHECK(train.examples[0].tokens2.empty());
  // ids: [MAX = 1, digit d = 6 + d, ] = 5
  CHECK(train.examples[0].tokens == std::vector<int32_t>{1, 8, 15, 5});
  const LraSplit val = read_lra_split(LraTask::listops, kLra + "listops", "val");
  REQUIRE(val.examples.size() == 1);
  CHECK(val.examples[0].label == 3);
  const LraSplit test = read_lra_split(LraTask::listops, kLra + "listops", "test");
  REQUIRE(test.examples.size() == 1);
  CHECK(test.examples[0].tokens == listops_ids("[MED 7 1 9 ]"));
  CHECK(test.examples[0].label == 7);
  const LraSplit cut = read_lra_split(LraTask::listops, kLra + "listops", "train", 3);
  CHECK(cut.examples[1].tokens == listops_ids("[SM 3 [MIN"));
}

TEST_CASE("lra: Text fixture as bytes + 1, tabs kept in the text") {
  const LraSplit train = read_lra_split(LraTask::text, kLra + "text", "train");
  REQUIRE(train.examples.size() == 2);
  CHECK(train.examples[0].label == 1);
  CHECK(train.examples[0].tokens == bytes_plus_one("Great film!"));
  CHECK(train.examples[1].label == 0);
  CHECK(train.examples[1].tokens == bytes_plus_one("Bad\tplot, caf\xC3\xA9 food."));
  CHECK(train.examples[1].tokens.back() == '.' + 1);
  CHECK(read_lra_split(LraTask::text, kLra + "text", "val").examples[0].tokens == bytes_plus_one("meh"));
  CHECK(read_lra_split(LraTask::text, kLra + "text", "test").examples[0].label == 1);
  CHECK(read_lra_split(LraTask::text, kLra + "text", "train", 5).examples[0].tokens == bytes_plus_one("Great"));
}

TEST_CASE("lra: Retrieval fixture, two documents, float labels, val reads the eval file") {
  const LraSplit train = read_lra_split(LraTask::retrieval, kLra + "retrieval", "train");
  REQUIRE(train.examples.size() == 2);
  CHECK(train.examples[0].label == 1);
  CHECK(train.examples[0].tokens == bytes_plus_one("abc"));
  CHECK(train.examples[0].tokens2 == bytes_plus_one("xy"));
  CHECK(train.examples[1].label == 0);
  CHECK(train.examples[1].tokens == bytes_plus_one("\"q\""));  // quotes are literal
  const LraSplit val = read_lra_split(LraTask::retrieval, kLra + "retrieval", "val");
  REQUIRE(val.examples.size() == 1);
  CHECK(val.examples[0].tokens2 == bytes_plus_one("doc two"));
  const LraSplit cut = read_lra_split(LraTask::retrieval, kLra + "retrieval", "val", 3);
  CHECK(cut.examples[0].tokens == bytes_plus_one("doc"));
  CHECK(cut.examples[0].tokens2 == bytes_plus_one("doc"));
}

TEST_CASE("lra: Image fixture, grey as TensorFlow's rgb_to_grayscale, 90/10 train/val") {
  // Five train records (one per data_batch file): train = round-half-even(4.5) = 4, val = 1.
  const LraSplit train = read_lra_split(LraTask::image, kLra + "image", "train");
  REQUIRE(train.examples.size() == 4);
  for (int r = 0; r < 4; ++r) CHECK(train.examples[static_cast<size_t>(r)].label == r + 3);
  CHECK(train.examples[0].tokens.size() == 1024);
  // Record 0, pixel 0: R 0, G 70, B 140 -> (0.5870 * 70 + 0.1140 * 140) / 255 * 255.5 = 57.16 -> 57.
  CHECK(train.examples[0].tokens[0] == 57 + 1);
  // Record 1, pixel 2: R 41, G 111, B 181 -> (0.2989*41 + 0.5870*111 + 0.1140*181) * 255.5/255 = 98.24 -> 98.
  CHECK(train.examples[1].tokens[2] == 98 + 1);
  const LraSplit val = read_lra_split(LraTask::image, kLra + "image", "val");
  REQUIRE(val.examples.size() == 1);
  CHECK(val.examples[0].label == 7);
  // The test record is grey (R = G = B = i % 256): the grey level is the value itself.
  const LraSplit test = read_lra_split(LraTask::image, kLra + "image", "test");
  REQUIRE(test.examples.size() == 1);
  CHECK(test.examples[0].label == 6);
  for (int i = 0; i < 1024; ++i) REQUIRE(test.examples[0].tokens[static_cast<size_t>(i)] == i % 256 + 1);
  CHECK(read_lra_split(LraTask::image, kLra + "image", "test", 10).examples[0].tokens.size() == 10);
}

TEST_CASE("lra: Pathfinder fixture, metadata in numeric order, 80/10/10 split") {
  // Ten images in metadata 0.npy (4), 2.npy (3), 10.npy (3); image k has pixel (x, y) =
  // (x * 8 + y + k) % 256 and label k % 2. Train = 8, val = the 9th, test = the 10th.
  const LraSplit train = read_lra_split(LraTask::pathfinder, kLra + "pathfinder", "train");
  REQUIRE(train.examples.size() == 8);
  for (int k = 0; k < 8; ++k) {
    const LraExample& ex = train.examples[static_cast<size_t>(k)];
    CHECK(ex.label == k % 2);
    REQUIRE(ex.tokens.size() == 1024);
    CHECK(ex.tokens[0] == k + 1);                       // (0, 0)
    CHECK(ex.tokens[1] == (8 + k) % 256 + 1);           // (1, 0): rows are x-fastest
    CHECK(ex.tokens[32] == (1 + k) % 256 + 1);          // (0, 1)
  }
  const LraSplit val = read_lra_split(LraTask::pathfinder, kLra + "pathfinder", "val");
  REQUIRE(val.examples.size() == 1);
  CHECK(val.examples[0].tokens[0] == 8 + 1);
  CHECK(val.examples[0].label == 0);
  const LraSplit test = read_lra_split(LraTask::pathfinder, kLra + "pathfinder", "test");
  REQUIRE(test.examples.size() == 1);
  CHECK(test.examples[0].tokens[0] == 9 + 1);
  CHECK(test.examples[0].label == 1);
  // The difficulty folder itself is accepted too.
  CHECK(read_lra_split(LraTask::pathfinder, kLra + "pathfinder/curv_contour_length_14", "test").examples.size() == 1);
}

TEST_CASE("lra: errors name the file, the line or record, and what was wrong") {
  TempDir t("lra_err");
  const std::string d = t.path.string();
  SUBCASE("missing file") {
    const std::string e = error_of(LraTask::listops, d, "train");
    CHECK(contains(e, "basic_train.tsv"));
    CHECK(contains(e, "no such file"));
    CHECK(contains(error_of(LraTask::retrieval, d, "val"), "new_aan_pairs.eval.tsv"));
    CHECK(contains(error_of(LraTask::image, d, "test"), "test_batch.bin"));
    CHECK(contains(error_of(LraTask::pathfinder, d, "test"), "curv_contour_length_14"));
  }
  SUBCASE("unknown split") { CHECK(contains(error_of(LraTask::text, d, "dev"), "unknown split 'dev'")); }
  SUBCASE("ListOps: bad header") {
    t.write("basic_train.tsv", "Src\tTarget\n( [MAX 1 ) 2 ) ] )\t2\n");
    const std::string e = error_of(LraTask::listops, d, "train");
    CHECK(contains(e, "basic_train.tsv:1:"));
    CHECK(contains(e, "header"));
  }
  SUBCASE("ListOps: label out of range") {
    t.write("basic_train.tsv", "Source\tTarget\n( ( ( [MAX 1 ) 2 ) ] )\t2\n( ( ( [SM 5 ) 7 ) ] )\t12\n");
    const std::string e = error_of(LraTask::listops, d, "train");
    CHECK(contains(e, "basic_train.tsv:3:"));
    CHECK(contains(e, "label 12 is out of range 0..9"));
  }
  SUBCASE("ListOps: unknown symbol") {
    t.write("basic_val.tsv", "Source\tTarget\r\n( ( ( [FIRST 1 ) 2 ) ] )\t1\r\n");
    const std::string e = error_of(LraTask::listops, d, "val");
    CHECK(contains(e, "basic_val.tsv:2:"));
    CHECK(contains(e, "unknown ListOps symbol '[FIRST'"));
  }
  SUBCASE("ListOps: binary bytes in a message are escaped, never copied raw") {
    t.write("basic_val.tsv", std::string("Source\tTarget\n( [\xff\x01\x1b[2J ) ]\t1\n"));
    const std::string e = error_of(LraTask::listops, d, "val");
    CHECK(contains(e, "unknown ListOps symbol '[\\xFF\\x01\\x1B[2J'"));
    CHECK(e.find('\x1b') == std::string::npos);
  }
  SUBCASE("ListOps: field count") {
    t.write("basic_test.tsv", "Source\tTarget\n( ( ( [MAX 1 ) 2 ) ] )\n");
    CHECK(contains(error_of(LraTask::listops, d, "test"), "basic_test.tsv:2: has 1 tab-separated fields, expected 2"));
  }
  SUBCASE("Text: non-integer label, missing tab, empty line inside") {
    t.write("train.tsv", "1\tok\npos\tgreat\n");
    std::string e = error_of(LraTask::text, d, "train");
    CHECK(contains(e, "train.tsv:2:"));
    CHECK(contains(e, "label 'pos' is not an integer"));
    t.write("val.tsv", "1 no tab here\n");
    CHECK(contains(error_of(LraTask::text, d, "val"), "val.tsv:1: has no tab"));
    t.write("test.tsv", "1\ta\n\n0\tb\n\n\n");
    CHECK(contains(error_of(LraTask::text, d, "test"), "test.tsv:2: empty line"));
    t.write("test.tsv", "1\ta\n0\tb\n\n\n");  // empty lines at the end are fine
    CHECK(read_lra_split(LraTask::text, d, "test").examples.size() == 2);
  }
  SUBCASE("Retrieval: field count, non-integer and out-of-range labels") {
    t.write("new_aan_pairs.train.tsv", "1\ta\tb\ttext one\n");
    CHECK(contains(error_of(LraTask::retrieval, d, "train"), "new_aan_pairs.train.tsv:1: has 4 tab-separated fields, expected 5"));
    t.write("new_aan_pairs.test.tsv", "0.5\ta\tb\tx\ty\n");
    CHECK(contains(error_of(LraTask::retrieval, d, "test"), "label '0.5' is not an integer"));
    t.write("new_aan_pairs.eval.tsv", "1\ta\tb\tx\ty\n2.0\ta\tb\tx\ty\n");
    const std::string e = error_of(LraTask::retrieval, d, "val");
    CHECK(contains(e, "new_aan_pairs.eval.tsv:2:"));
    CHECK(contains(e, "label 2 is out of range 0..1"));
  }
  SUBCASE("Image: truncated CIFAR record, missing batch") {
    const std::string record(3073, '\x01');
    for (int k = 1; k <= 5; ++k) t.write("data_batch_" + std::to_string(k) + ".bin", record);
    CHECK(read_lra_split(LraTask::image, d, "train").examples.size() == 4);  // round-half-even(4.5)
    t.write("data_batch_3.bin", record + record.substr(0, 100));
    const std::string e = error_of(LraTask::image, d, "train");
    CHECK(contains(e, "data_batch_3.bin"));
    CHECK(contains(e, "record 1"));
    t.write("data_batch_3.bin", record);
    std::filesystem::remove(t.file("data_batch_4.bin"));
    CHECK(contains(error_of(LraTask::image, d, "val"), "data_batch_4.bin: no such file"));
  }
  SUBCASE("Pathfinder: metadata line with too few fields, bad label, PNG of the wrong size, missing image") {
    t.write("curv_contour_length_14/imgs/0/sample_0.png", grey_png(32, 10));
    t.write("curv_contour_length_14/imgs/0/sample_1.png", grey_png(32, 20));
    t.write("curv_contour_length_14/metadata/0.npy", "imgs/0 sample_0.png 0 1\nimgs/0 sample_1.png 1\n");
    std::string e = error_of(LraTask::pathfinder, d, "train");
    CHECK(contains(e, "0.npy:2:"));
    CHECK(contains(e, "has 3 fields, expected at least 4"));
    t.write("curv_contour_length_14/metadata/0.npy", "imgs/0 sample_0.png 0 1\nimgs/0 sample_1.png 1 yes\n");
    e = error_of(LraTask::pathfinder, d, "train");
    CHECK(contains(e, "0.npy:2:"));
    CHECK(contains(e, "label 'yes' is not an integer"));
    // Ten images so that train (8) holds both sizes: the 16x16 one is named with its metadata line.
    std::string meta;
    for (int k = 0; k < 10; ++k) {
      t.write("curv_contour_length_14/imgs/0/s" + std::to_string(k) + ".png", grey_png(k == 5 ? 16 : 32, 7));
      meta += "imgs/0 s" + std::to_string(k) + ".png " + std::to_string(k) + " " + std::to_string(k % 2) + "\n";
    }
    t.write("curv_contour_length_14/metadata/0.npy", meta);
    e = error_of(LraTask::pathfinder, d, "train");
    CHECK(contains(e, "s5.png"));
    CHECK(contains(e, "0.npy:6"));
    CHECK(contains(e, "is 16x16, expected 32x32"));
    CHECK(read_lra_split(LraTask::pathfinder, d, "test").examples[0].tokens[0] == 8);
    t.write("curv_contour_length_14/metadata/0.npy", meta + "imgs/0 missing.png 10 0\n");
    e = error_of(LraTask::pathfinder, d, "test");
    CHECK(contains(e, "missing.png"));
    CHECK(contains(e, "0.npy:11"));
  }
  SUBCASE("Pathfinder: split_sizes.txt that does not match the metadata") {
    t.write("curv_contour_length_14/imgs/0/sample_0.png", grey_png(32, 10));
    t.write("curv_contour_length_14/metadata/0.npy", "imgs/0 sample_0.png 0 1\n");
    t.write("curv_contour_length_14/split_sizes.txt", "train 1\nval 1\ntest 1\n");
    CHECK(contains(error_of(LraTask::pathfinder, d, "train"), "add up to 3 but the metadata lists 1 images"));
  }
}

namespace {

uint32_t crc32(const std::string& s) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : s) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return ~c;
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string png_chunk(const std::string& kind, const std::string& data) {
  return be32(static_cast<uint32_t>(data.size())) + kind + data + be32(crc32(kind + data));
}

std::string grey_png(int side, uint8_t value) {
  std::string raw;
  for (int y = 0; y < side; ++y) {
    raw += '\0';
    raw += std::string(static_cast<size_t>(side), static_cast<char>(value));
  }
  // zlib stream of one stored block (raw is far below 65535 bytes), then Adler-32.
  uint32_t a = 1, b = 0;
  for (unsigned char c : raw) {
    a = (a + c) % 65521;
    b = (b + a) % 65521;
  }
  const uint16_t len = static_cast<uint16_t>(raw.size()), nlen = static_cast<uint16_t>(~len);
  std::string z = "\x78\x01";
  z += '\x01';
  z += {static_cast<char>(len & 0xFF), static_cast<char>(len >> 8), static_cast<char>(nlen & 0xFF),
        static_cast<char>(nlen >> 8)};
  z += raw + be32((b << 16) | a);
  std::string ihdr = be32(static_cast<uint32_t>(side)) + be32(static_cast<uint32_t>(side));
  ihdr += {8, 0, 0, 0, 0};
  return std::string("\x89PNG\r\n\x1a\n", 8) + png_chunk("IHDR", ihdr) + png_chunk("IDAT", z) + png_chunk("IEND", "");
}

}  // namespace
