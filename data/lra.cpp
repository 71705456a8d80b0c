// The LRA task table and the readers of the release files (data/lra.h). The rules each reader
// follows are written at its function; docs/ARCHITECTURE.md "LRA data" has the overview.
#include "data/lra.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <utility>

#include "core/error.h"
#include "core/quote.h"
#include "core/regular_file.h"
#include "data/image.h"
#include "data/image_dataset.h"

namespace hh::data {

namespace fs = std::filesystem;

namespace {

struct TaskRow {
  LraTask task;
  const char* name;
  LraTaskInfo info;
};

// ListOps: 15 symbols (ids 1..15) + padding; bytes and grey levels: 256 values + padding.
const TaskRow kTasks[] = {
    {LraTask::listops, "listops", {16, 10, 2000, false}},
    {LraTask::text, "text", {257, 2, 4000, false}},
    {LraTask::retrieval, "retrieval", {257, 2, 4000, true}},
    {LraTask::image, "image", {257, 10, 1024, false}},
    {LraTask::pathfinder, "pathfinder", {257, 2, 1024, false}},
};

const TaskRow& row_of(LraTask t) {
  for (const TaskRow& r : kTasks)
    if (r.task == t) return r;
  fail(str("lra: unknown task id ", static_cast<int>(t)));
}

std::string quoted(std::string_view s) { return quote_text(s, 40); }

std::vector<std::string_view> split_tabs(std::string_view line) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    const size_t tab = line.find('\t', start);
    if (tab == std::string_view::npos) {
      out.push_back(line.substr(start));
      return out;
    }
    out.push_back(line.substr(start, tab - start));
    start = tab + 1;
  }
}

// The label in `field` as 0..num_classes-1; an empty string on success, else what is wrong.
// allow_float: "1.0" is 1 (the Retrieval files are read as floats by the LRA pipeline).
std::string parse_label(std::string_view field, int64_t num_classes, bool allow_float, int32_t& label) {
  const std::string s(field);
  const bool plain = !s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-');
  char* end = nullptr;
  long long v = 0;
  bool ok = false;
  if (plain) {
    errno = 0;
    v = std::strtoll(s.c_str(), &end, 10);
    ok = end == s.c_str() + s.size() && errno == 0;
    if (!ok && allow_float) {
      const double d = std::strtod(s.c_str(), &end);
      ok = end == s.c_str() + s.size() && d == static_cast<double>(static_cast<long long>(d)) && std::abs(d) < 1e15;
      v = static_cast<long long>(d);
    }
  }
  if (!ok) return str("label ", quoted(field), " is not an integer");
  if (v < 0 || v >= num_classes) return str("label ", v, " is out of range 0..", num_classes - 1);
  label = static_cast<int32_t>(v);
  return "";
}

std::vector<int32_t> byte_tokens(std::string_view text, int64_t max_len) {
  const size_t n = std::min(text.size(), static_cast<size_t>(max_len));
  std::vector<int32_t> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<int32_t>(static_cast<unsigned char>(text[i])) + 1;
  return out;
}

// Grey level of an RGB pixel as TensorFlow's rgb_to_grayscale (the LRA input pipeline) makes it:
// the bytes scaled to [0, 1] in f32, weighted 0.2989 R + 0.5870 G + 0.1140 B, back to 8 bits by
// multiplying by 255.5 and truncating. Grey pixels (R = G = B) keep their value.
int32_t grey_of(uint8_t r, uint8_t g, uint8_t b) {
  const float s = 0.2989f * (static_cast<float>(r) / 255.0f) + 0.5870f * (static_cast<float>(g) / 255.0f) +
                  0.1140f * (static_cast<float>(b) / 255.0f);
  const float v = s * 255.5f;
  return v >= 255.0f ? 255 : static_cast<int32_t>(v);
}

// Where the boundary of a TFDS percent slice falls ("train[:90%]"): round(n * pct / 100) with
// Python's round half to even.
int64_t percent_boundary(int64_t n, int64_t pct) {
  int64_t q = n * pct / 100;
  const int64_t r = n * pct % 100;
  if (r > 50 || (r == 50 && q % 2 == 1)) ++q;
  return q;
}

void require_file(const std::string& path, const char* task) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    fail(str("lra ", task, ": ", path, ": ", fs::exists(path, ec) ? "is not a regular file" : "no such file"));
}

// Reads `path` line by line ('\n'; a trailing '\r' and a UTF-8 byte-order mark are dropped) and
// calls on_line(line, line_no). Empty lines at the end of the file are fine; an empty line with
// data after it is an error (no silently skipped rows).
template <typename F>
void for_each_line(const std::string& path, const char* task, F on_line) {
  require_file(path, task);
  check_regular_file(path, str("lra ", task));  // names the kind of file (a FIFO would block the open below)
  std::ifstream f(path, std::ios::binary);
  HH_CHECK(f.good(), "lra ", task, ": ", path, ": cannot open the file");
  std::string line;
  int64_t line_no = 0, empty_line = 0;
  while (std::getline(f, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1 && line.compare(0, 3, "\xEF\xBB\xBF") == 0) line.erase(0, 3);
    if (line.empty()) {
      if (empty_line == 0) empty_line = line_no;
      continue;
    }
    if (empty_line != 0) fail(str("lra ", task, ": ", path, ":", empty_line, ": empty line"));
    on_line(std::string_view(line), line_no);
  }
  HH_CHECK(!f.bad(), "lra ", task, ": ", path, ": read error");
}

std::string file_in(const std::string& dir, const std::string& name) { return (fs::path(dir) / name).string(); }

void check_split(const std::string& split) {
  if (split != "train" && split != "val" && split != "test")
    fail(str("lra: unknown split '", split, "' (valid: train, val, test)"));
}

// ---- ListOps: basic_<split>.tsv, header "Source\tTarget", rows "<expression>\t<value>" ----

int32_t listops_id(std::string_view sym) {
  const auto& v = lra_listops_vocab();
  for (size_t i = 0; i < v.size(); ++i)
    if (sym == v[i]) return static_cast<int32_t>(i) + 1;
  return 0;
}

void read_listops(const std::string& dir, const std::string& split, int64_t max_len, LraSplit& out) {
  const std::string path = file_in(dir, "basic_" + split + ".tsv");
  const LraTaskInfo info = lra_task_info(LraTask::listops);
  for_each_line(path, "listops", [&](std::string_view line, int64_t no) {
    if (no == 1) {
      if (line != "Source\tTarget")
        fail(str("lra listops: ", path, ":1: expected the header 'Source<TAB>Target', got ", quoted(line)));
      return;
    }
    const auto f = split_tabs(line);
    if (f.size() != 2) fail(str("lra listops: ", path, ":", no, ": has ", f.size(), " tab-separated fields, expected 2"));
    LraExample ex;
    const std::string err = parse_label(f[1], info.num_classes, false, ex.label);
    if (!err.empty()) fail(str("lra listops: ", path, ":", no, ": ", err));
    std::string_view src = f[0];
    size_t pos = 0;
    while (pos < src.size()) {
      if (src[pos] == ' ') {
        ++pos;
        continue;
      }
      size_t end = src.find(' ', pos);
      if (end == std::string_view::npos) end = src.size();
      const std::string_view sym = src.substr(pos, end - pos);
      pos = end;
      if (sym == "(" || sym == ")") continue;
      const int32_t id = listops_id(sym);
      if (id == 0)
        fail(str("lra listops: ", path, ":", no, ": unknown ListOps symbol ", quoted(sym),
                 " (known: [MAX [MIN [MED [SM ] 0-9 and parentheses)"));
      if (static_cast<int64_t>(ex.tokens.size()) < max_len) ex.tokens.push_back(id);
    }
    if (ex.tokens.empty()) fail(str("lra listops: ", path, ":", no, ": the Source is empty"));
    out.examples.push_back(std::move(ex));
  });
  HH_CHECK(!out.examples.empty(), "lra listops: ", path, ": no examples (only a header or an empty file)");
}

// ---- Text: <split>.tsv, rows "<label>\t<text>" (the text is everything after the first tab) ----

void read_text(const std::string& dir, const std::string& split, int64_t max_len, LraSplit& out) {
  const std::string path = file_in(dir, split + ".tsv");
  for_each_line(path, "text", [&](std::string_view line, int64_t no) {
    if (no == 1 && line == "label\ttext") return;  // an optional header
    const size_t tab = line.find('\t');
    if (tab == std::string_view::npos)
      fail(str("lra text: ", path, ":", no, ": has no tab; expected '<label><TAB><text>'"));
    LraExample ex;
    const std::string err = parse_label(line.substr(0, tab), 2, false, ex.label);
    if (!err.empty()) fail(str("lra text: ", path, ":", no, ": ", err));
    ex.tokens = byte_tokens(line.substr(tab + 1), max_len);
    out.examples.push_back(std::move(ex));
  });
  HH_CHECK(!out.examples.empty(), "lra text: ", path, ": no examples (empty file)");
}

// ---- Retrieval: new_aan_pairs.<train|eval|test>.tsv, rows "label\tid1\tid2\ttext1\ttext2" ----

void read_retrieval(const std::string& dir, const std::string& split, int64_t max_len, LraSplit& out) {
  const std::string path = file_in(dir, "new_aan_pairs." + std::string(split == "val" ? "eval" : split) + ".tsv");
  for_each_line(path, "retrieval", [&](std::string_view line, int64_t no) {
    const auto f = split_tabs(line);
    if (f.size() != 5)
      fail(str("lra retrieval: ", path, ":", no, ": has ", f.size(),
               " tab-separated fields, expected 5 (label, id1, id2, text1, text2)"));
    LraExample ex;
    const std::string err = parse_label(f[0], 2, true, ex.label);
    if (!err.empty()) fail(str("lra retrieval: ", path, ":", no, ": ", err));
    ex.tokens = byte_tokens(f[3], max_len);
    ex.tokens2 = byte_tokens(f[4], max_len);
    out.examples.push_back(std::move(ex));
  });
  HH_CHECK(!out.examples.empty(), "lra retrieval: ", path, ": no examples (empty file)");
}

// ---- Image: CIFAR-10 binary. train = the first 90% of data_batch_1..5 (in file order), val = the
// last 10% (the LRA input pipeline's train[:90%] / train[90%:]), test = test_batch.bin ----

void read_image_task(const std::string& dir, const std::string& split, int64_t max_len, LraSplit& out) {
  std::vector<std::string> files;
  if (split == "test") {
    files.push_back(file_in(dir, "test_batch.bin"));
  } else {
    for (int k = 1; k <= 5; ++k) files.push_back(file_in(dir, "data_batch_" + std::to_string(k) + ".bin"));
  }
  // A truncated last record is named here (read_cifar10 reports only the size).
  constexpr uintmax_t kRecord = 3073;  // 1 label byte + 3 planes of 32 x 32
  for (const std::string& f : files) {
    require_file(f, "image");
    std::error_code ec;
    const uintmax_t size = fs::file_size(f, ec);
    HH_CHECK(!ec, "lra image: ", f, ": ", ec.message());
    HH_CHECK(size % kRecord == 0, "lra image: ", f, ": record ", size / kRecord, " (0-based) is truncated: ",
             size % kRecord, " of its ", kRecord, " bytes");
  }
  const ImageDataset d = read_cifar10(files);
  int64_t first = 0, last = d.n;
  if (split != "test") {
    const int64_t cut = percent_boundary(d.n, 90);
    if (split == "train") last = cut;
    else first = cut;
  }
  const size_t pixels = static_cast<size_t>(d.h * d.w);
  for (int64_t i = first; i < last; ++i) {
    LraExample ex;
    const uint8_t* p = d.pixels.data() + static_cast<size_t>(i) * pixels * 3;
    const size_t n = std::min(pixels, static_cast<size_t>(max_len));
    ex.tokens.resize(n);
    for (size_t j = 0; j < n; ++j) ex.tokens[j] = grey_of(p[3 * j], p[3 * j + 1], p[3 * j + 2]) + 1;
    ex.label = static_cast<int32_t>(d.labels[static_cast<size_t>(i)]);
    out.examples.push_back(std::move(ex));
  }
  HH_CHECK(!out.examples.empty(), "lra image: the ", split, " split of ", dir, " is empty (", d.n, " records)");
}

// ---- Pathfinder: <root>/metadata/<n>.npy (text, one image per line: folder, file name, index,
// label, ...), images at <root>/<folder>/<file name> ----

// The difficulty folder: `dir` itself when it holds metadata/, else dir/curv_contour_length_14,
// else the only dir/curv_* folder there is.
std::string pathfinder_root(const std::string& dir) {
  std::error_code ec;
  if (fs::is_directory(fs::path(dir) / "metadata", ec)) return dir;
  const fs::path hard = fs::path(dir) / "curv_contour_length_14";
  if (fs::is_directory(hard, ec)) return hard.string();
  std::vector<std::string> found;
  if (fs::is_directory(dir, ec))
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_directory(ec) && e.path().filename().string().compare(0, 5, "curv_") == 0) found.push_back(e.path().string());
  if (found.size() == 1) return found[0];
  fail(str("lra pathfinder: ", dir, ": no metadata/ folder, no curv_contour_length_14/ and ",
           found.empty() ? std::string("no other curv_* folder") : str(found.size(), " curv_* folders to choose from"),
           "; point the data folder at one difficulty folder"));
}

struct PathfinderItem {
  std::string image;   // full path
  std::string where;   // "metadata file:line"
  int32_t label = 0;
};

// Optional split_sizes.txt, written by generate_pathfinder: lines "train N", "val N", "test N".
bool read_split_sizes(const std::string& root, int64_t sizes[3]) {
  const std::string path = file_in(root, "split_sizes.txt");
  std::error_code ec;
  if (!fs::exists(path, ec)) return false;
  const char* names[3] = {"train", "val", "test"};
  int64_t seen = 0;
  for_each_line(path, "pathfinder", [&](std::string_view line, int64_t no) {
    const size_t sp = line.find(' ');
    const std::string_view name = line.substr(0, sp);
    HH_CHECK(no <= 3 && sp != std::string_view::npos && name == names[no - 1], "lra pathfinder: ", path, ":", no,
             ": expected '", names[std::min<int64_t>(no, 3) - 1], " <count>', got ", quoted(line));
    const std::string count(line.substr(sp + 1));
    char* end = nullptr;
    const long long v = std::strtoll(count.c_str(), &end, 10);
    HH_CHECK(!count.empty() && end == count.c_str() + count.size() && v >= 0, "lra pathfinder: ", path, ":", no,
             ": the count ", quoted(count), " is not a non-negative integer");
    sizes[no - 1] = v;
    ++seen;
  });
  HH_CHECK(seen == 3, "lra pathfinder: ", path, ": expected 3 lines (train, val, test), got ", seen);
  return true;
}

void read_pathfinder(const std::string& dir, const std::string& split, int64_t max_len, LraSplit& out) {
  const std::string root = pathfinder_root(dir);
  const fs::path meta_dir = fs::path(root) / "metadata";
  std::error_code ec;
  HH_CHECK(fs::is_directory(meta_dir, ec), "lra pathfinder: ", meta_dir.string(), ": no such folder");
  // Metadata files in the order of their numbers (0.npy, 1.npy, ..., 10.npy), as the PyTorch LRA
  // code sorts them; lines in file order.
  std::vector<std::pair<long long, std::string>> metas;
  for (const auto& e : fs::directory_iterator(meta_dir, ec)) {
    if (!e.is_regular_file(ec) || e.path().extension() != ".npy") continue;
    const std::string stem = e.path().stem().string();
    char* end = nullptr;
    const long long n = std::strtoll(stem.c_str(), &end, 10);
    HH_CHECK(!stem.empty() && end == stem.c_str() + stem.size(), "lra pathfinder: ", e.path().string(),
             ": a metadata file must be named <number>.npy");
    metas.emplace_back(n, e.path().string());
  }
  HH_CHECK(!metas.empty(), "lra pathfinder: ", meta_dir.string(), ": no <number>.npy metadata files");
  std::sort(metas.begin(), metas.end());
  std::vector<PathfinderItem> items;
  for (const auto& m : metas) {
    for_each_line(m.second, "pathfinder", [&](std::string_view line, int64_t no) {
      std::vector<std::string_view> f;
      size_t pos = 0;
      while (pos < line.size()) {
        if (line[pos] == ' ' || line[pos] == '\t') {
          ++pos;
          continue;
        }
        size_t end = line.find_first_of(" \t", pos);
        if (end == std::string_view::npos) end = line.size();
        f.push_back(line.substr(pos, end - pos));
        pos = end;
      }
      const std::string where = str(m.second, ":", no);
      if (f.size() < 4)
        fail(str("lra pathfinder: ", where, ": the metadata line has ", f.size(),
                 " fields, expected at least 4 (folder, file name, index, label)"));
      PathfinderItem it;
      const std::string err = parse_label(f[3], 2, false, it.label);
      if (!err.empty()) fail(str("lra pathfinder: ", where, ": ", err));
      // Image paths stay inside the data root: an absolute folder or file name, or a ".." in
      // either, is refused (a line "/dev zero 0 0" read /dev/zero until memory ran out).
      const fs::path rel = fs::path(std::string(f[0])) / std::string(f[1]);
      bool escapes = rel.is_absolute() || rel.has_root_name() || rel.has_root_directory();
      for (const fs::path& part : rel) escapes = escapes || part == "..";
      if (escapes)
        fail(str("lra pathfinder: ", where, ": the image path ", quoted(rel.string()),
                 " leaves the data folder (absolute, or with a \"..\")"));
      it.image = (fs::path(root) / rel).string();
      it.where = where;
      items.push_back(std::move(it));
    });
  }
  // The split: the sizes of split_sizes.txt when the folder has one (generated sets), else the LRA
  // input pipeline's rule over all images in order: train [0, 80%), val [80%, 90%), test [90%, 100%).
  const int64_t n = static_cast<int64_t>(items.size());
  int64_t sizes[3] = {0, 0, 0};
  int64_t b1 = percent_boundary(n, 80), b2 = percent_boundary(n, 90), b3 = n;
  if (read_split_sizes(root, sizes)) {
    HH_CHECK(sizes[0] + sizes[1] + sizes[2] == n, "lra pathfinder: ", file_in(root, "split_sizes.txt"), ": the sizes add up to ",
             sizes[0] + sizes[1] + sizes[2], " but the metadata lists ", n, " images");
    b1 = sizes[0];
    b2 = b1 + sizes[1];
  }
  const int64_t first = split == "train" ? 0 : split == "val" ? b1 : b2;
  const int64_t last = split == "train" ? b1 : split == "val" ? b2 : b3;
  HH_CHECK(last > first, "lra pathfinder: the ", split, " split of ", root, " is empty (", n, " images in the metadata)");

  // Images in parallel; an error is kept per image and the first failing image's is thrown.
  const int64_t count = last - first;
  out.examples.resize(static_cast<size_t>(count));
  std::vector<std::string> errors(static_cast<size_t>(count));
  std::vector<int64_t> heights(static_cast<size_t>(count)), widths(static_cast<size_t>(count));
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t i = 0; i < count; ++i) {
    const PathfinderItem& it = items[static_cast<size_t>(first + i)];
    LraExample& ex = out.examples[static_cast<size_t>(i)];
    try {
      const RgbImage img = read_image(it.image);
      heights[static_cast<size_t>(i)] = img.height;
      widths[static_cast<size_t>(i)] = img.width;
      const size_t px = static_cast<size_t>(img.height * img.width);
      const size_t m = std::min(px, static_cast<size_t>(max_len));
      ex.tokens.resize(m);
      for (size_t j = 0; j < m; ++j) ex.tokens[j] = grey_of(img.rgb[3 * j], img.rgb[3 * j + 1], img.rgb[3 * j + 2]) + 1;
      ex.label = it.label;
    } catch (const std::exception& e) {
      errors[static_cast<size_t>(i)] = str(e.what(), " (listed at ", it.where, ")");
    }
  }
  for (const std::string& e : errors)
    if (!e.empty()) fail("lra pathfinder: " + e);
  // Every image must be square and of one size (the first one's).
  const int64_t side = heights[0];
  for (int64_t i = 0; i < count; ++i) {
    const size_t k = static_cast<size_t>(i);
    if (heights[k] != side || widths[k] != side)
      fail(str("lra pathfinder: ", items[static_cast<size_t>(first + i)].image, " (listed at ",
               items[static_cast<size_t>(first + i)].where, ") is ", widths[k], "x", heights[k],
               ", expected ", side, "x", side, " as the split's first image"));
  }
}

}  // namespace

const std::vector<std::string>& lra_listops_vocab() {
  static const std::vector<std::string> v{"[MAX", "[MIN", "[MED", "[SM", "]", "0", "1", "2",
                                          "3",    "4",    "5",    "6",   "7", "8", "9"};
  return v;
}

LraTask parse_lra_task(const std::string& name) {
  for (const TaskRow& r : kTasks)
    if (name == r.name) return r.task;
  fail(str("lra: unknown task '", name, "' (valid: listops, text, retrieval, image, pathfinder)"));
}

const char* lra_task_name(LraTask t) { return row_of(t).name; }

LraTaskInfo lra_task_info(LraTask t) { return row_of(t).info; }

LraSplit read_lra_split(LraTask task, const std::string& dir, const std::string& split, int64_t max_len) {
  check_split(split);
  if (max_len <= 0) max_len = lra_task_info(task).max_len;
  LraSplit out;
  out.task = task;
  switch (task) {
    case LraTask::listops: read_listops(dir, split, max_len, out); break;
    case LraTask::text: read_text(dir, split, max_len, out); break;
    case LraTask::retrieval: read_retrieval(dir, split, max_len, out); break;
    case LraTask::image: read_image_task(dir, split, max_len, out); break;
    case LraTask::pathfinder: read_pathfinder(dir, split, max_len, out); break;
  }
  return out;
}

}  // namespace hh::data
