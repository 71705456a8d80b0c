// The Pathfinder generator (data/lra_generate.h): a simple generator written from the published
// task definition (Linsley et al. 2018; the LRA paper's Pathfinder-32), not a copy of the original.
//
// Every image has two "target" paths of contour_length dashes and contour_length/3-dash distractor
// paths (20 / (contour_length/3) of them, as the LRA settings name), all curved and dashed, none
// touching another. Two end dots are drawn: positive images put them on the two ends of one target
// path, negative images on one end of each target path, so both classes show the same things and
// only the connection tells them apart. A path is a chain of dashes: each dash is 2 px long
// (scaled by size/32) with a 1 px gap, its direction turning by a uniform angle in [-0.5, 0.5] rad
// from the last; path centre lines keep 2 px (scaled) away from other paths and from their own
// non-adjacent dashes, and 1.5 px from the border; a dot keeps 1 px between its edge and other
// paths' lines. Lines are 1 px wide, dots have radius 1.5 px; both are drawn
// white on black, anti-aliased by 4x4 supersampling.
//
// Differences from the original generator: no paddle contrast or thickness jitter, one fixed
// turning rule instead of its continuity-controlled one, distractors may be fewer when no room is
// found for one, and the dots may lie closer than its seed distance. Labels are balanced exactly
// within each split (a shuffled half-and-half list). Image i draws from its own Philox stream
// seeded by (seed, i), so the files are the same for any thread count.
//
// Files: <dir>/curv_contour_length_<L>/imgs/<k>/sample_<j>.png (1000 per folder, images numbered
// over train, val, test in that order), metadata/<k>.npy (text, one line per image: folder, file
// name, number, label, then the settings), and split_sizes.txt ("train N", "val N", "test N"),
// which read_lra_split uses instead of the release's 80/10/10 rule. Metadata and split_sizes.txt
// are written (atomically) after all images, so a folder whose run died has no metadata.
#include <png.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/generator.h"
#include "data/lra_generate.h"
#include "data/parallel_items.h"

namespace hh::data {

namespace fs = std::filesystem;

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int kSuper = 4;              // supersampling factor per axis
constexpr double kMaxTurn = 0.5;       // radians between consecutive dashes, at most
constexpr double kTurnDrift = 0.2;     // change of that turn from one dash to the next, at most
constexpr int kPerFolder = 1000;       // images per imgs/<k> folder and metadata file
constexpr int kPathTries = 100;        // starting points tried per path
constexpr int kTurnTries = 16;         // turning angles tried per dash
constexpr int kImageTries = 200;       // whole images restarted before giving up

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct Pt {
  double x, y;
};
struct Dash {
  Pt a, b;
};
using Path = std::vector<Dash>;

struct Geometry {
  double dash, gap, clearance, border, line_radius, dot_radius;
  explicit Geometry(int size) {
    const double s = size / 32.0;
    dash = 2.0 * s;
    gap = 1.0 * s;
    clearance = 2.0 * s;
    border = 1.5 * s;
    line_radius = 0.5 * s;
    dot_radius = 1.5 * s;
  }
};

double uniform(Generator& g, double lo, double hi) { return lo + (hi - lo) * (1.0 - g.next_uniform()); }

// Points along a dash, about every 0.5 px: what clearance checks measure.
void sample_dash(const Dash& d, std::vector<Pt>& out) {
  const double len = std::hypot(d.b.x - d.a.x, d.b.y - d.a.y);
  const int n = std::max(1, static_cast<int>(std::ceil(len / 0.5)));
  for (int k = 0; k <= n; ++k) {
    const double t = static_cast<double>(k) / n;
    out.push_back({d.a.x + t * (d.b.x - d.a.x), d.a.y + t * (d.b.y - d.a.y)});
  }
}

// The points of the paths placed so far, bucketed in cells of the clearance's size, so a
// clearance check looks at the 3x3 cells around a point.
class Occupancy {
 public:
  Occupancy(int size, double clearance)
      : cell_(clearance), n_(static_cast<int>(std::ceil(size / clearance)) + 1), cells_(static_cast<size_t>(n_ * n_)) {}
  bool clear(const Pt& p) const {
    const int cx = index(p.x), cy = index(p.y);
    const double d2 = cell_ * cell_;
    for (int y = std::max(0, cy - 1); y <= std::min(n_ - 1, cy + 1); ++y)
      for (int x = std::max(0, cx - 1); x <= std::min(n_ - 1, cx + 1); ++x)
        for (const Pt& q : cells_[static_cast<size_t>(y * n_ + x)])
          if ((p.x - q.x) * (p.x - q.x) + (p.y - q.y) * (p.y - q.y) < d2) return false;
    return true;
  }
  void add(const Pt& p) { cells_[static_cast<size_t>(index(p.y) * n_ + index(p.x))].push_back(p); }

 private:
  int index(double v) const { return std::clamp(static_cast<int>(v / cell_), 0, n_ - 1); }
  double cell_;
  int n_;
  std::vector<std::vector<Pt>> cells_;
};

bool far_from(const std::vector<Pt>& pts, const std::vector<Pt>& others, double dist) {
  const double d2 = dist * dist;
  for (const Pt& p : pts)
    for (const Pt& q : others)
      if ((p.x - q.x) * (p.x - q.x) + (p.y - q.y) * (p.y - q.y) < d2) return false;
  return true;
}

// Tries to place a path of `dashes` dashes clear of the paths placed so far; on success adds its
// points to `occupied`. A dash that does not fit gets a few other turning angles before the path
// is started again elsewhere.
// `points` receives the path's sampled centre line; no point may come within `keep` of a dot.
bool place_path(Generator& g, const Geometry& geo, int size, int dashes, Occupancy& occupied, Path& path,
                std::vector<Pt>& points, const std::vector<Pt>& dots = {}, double keep = 0.0) {
  const double lo = geo.border, hi = size - geo.border;
  std::vector<std::vector<Pt>> pts;  // per dash
  for (int attempt = 0; attempt < kPathTries; ++attempt) {
    path.clear();
    pts.clear();
    Pt p{uniform(g, lo, hi), uniform(g, lo, hi)};
    double angle = uniform(g, 0.0, 2 * kPi);
    double turn = uniform(g, -kMaxTurn, kMaxTurn);
    bool ok = true;
    for (int k = 0; k < dashes && ok; ++k) {
      ok = false;
      for (int t = 0; t < kTurnTries && !ok; ++t) {
        // The turn drifts slowly, so paths bend in smooth arcs rather than zigzag.
        const double tk = k == 0 ? 0.0 : std::clamp(turn + uniform(g, -kTurnDrift, kTurnDrift), -kMaxTurn, kMaxTurn);
        const double a = angle + tk;
        const Pt q{p.x + geo.dash * std::cos(a), p.y + geo.dash * std::sin(a)};
        if (q.x < lo || q.x > hi || q.y < lo || q.y > hi) continue;
        std::vector<Pt> s;
        sample_dash({p, q}, s);
        ok = std::all_of(s.begin(), s.end(), [&](const Pt& x) { return occupied.clear(x); }) && far_from(s, dots, keep);
        for (int j = 0; ok && j + 1 < k; ++j) ok = far_from(s, pts[static_cast<size_t>(j)], geo.clearance);
        if (!ok) continue;
        angle = a;
        if (k > 0) turn = tk;
        path.push_back({p, q});
        pts.push_back(std::move(s));
        p = {q.x + geo.gap * std::cos(a), q.y + geo.gap * std::sin(a)};
      }
    }
    if (!ok) continue;
    points.clear();
    for (const auto& s : pts) points.insert(points.end(), s.begin(), s.end());
    for (const Pt& x : points) occupied.add(x);
    return true;
  }
  return false;
}

double dist_to_segment(double px, double py, const Dash& d) {
  const double vx = d.b.x - d.a.x, vy = d.b.y - d.a.y;
  const double len2 = vx * vx + vy * vy;
  double t = len2 > 0 ? ((px - d.a.x) * vx + (py - d.a.y) * vy) / len2 : 0.0;
  t = std::clamp(t, 0.0, 1.0);
  return std::hypot(px - (d.a.x + t * vx), py - (d.a.y + t * vy));
}

// Renders the dashes and dots into size x size grey levels (supersampled coverage).
std::vector<uint8_t> render(int size, const Geometry& geo, const std::vector<Path>& paths, const std::vector<Pt>& dots) {
  const int S = size * kSuper;
  std::vector<uint8_t> hit(static_cast<size_t>(S) * static_cast<size_t>(S), 0);
  auto stamp = [&](double x0, double y0, double x1, double y1, auto inside) {
    const int i0 = std::max(0, static_cast<int>(std::floor(y0 * kSuper))), i1 = std::min(S - 1, static_cast<int>(y1 * kSuper));
    const int j0 = std::max(0, static_cast<int>(std::floor(x0 * kSuper))), j1 = std::min(S - 1, static_cast<int>(x1 * kSuper));
    for (int i = i0; i <= i1; ++i)
      for (int j = j0; j <= j1; ++j) {
        const double px = (j + 0.5) / kSuper, py = (i + 0.5) / kSuper;
        if (inside(px, py)) hit[static_cast<size_t>(i) * static_cast<size_t>(S) + static_cast<size_t>(j)] = 1;
      }
  };
  const double r = geo.line_radius;
  for (const Path& path : paths)
    for (const Dash& d : path)
      stamp(std::min(d.a.x, d.b.x) - r, std::min(d.a.y, d.b.y) - r, std::max(d.a.x, d.b.x) + r,
            std::max(d.a.y, d.b.y) + r, [&](double px, double py) { return dist_to_segment(px, py, d) <= r; });
  const double R = geo.dot_radius;
  for (const Pt& c : dots) {
    stamp(c.x - R, c.y - R, c.x + R, c.y + R, [&](double px, double py) { return std::hypot(px - c.x, py - c.y) <= R; });
  }
  std::vector<uint8_t> out(static_cast<size_t>(size) * static_cast<size_t>(size));
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x) {
      int count = 0;
      for (int i = 0; i < kSuper; ++i)
        for (int j = 0; j < kSuper; ++j)
          count += hit[static_cast<size_t>(y * kSuper + i) * static_cast<size_t>(S) + static_cast<size_t>(x * kSuper + j)];
      out[static_cast<size_t>(y) * static_cast<size_t>(size) + static_cast<size_t>(x)] =
          static_cast<uint8_t>((count * 255 + kSuper * kSuper / 2) / (kSuper * kSuper));
    }
  return out;
}

// One image of the given label, from image i's stream.
std::vector<uint8_t> draw_image(const PathfinderOptions& o, int64_t i, int label) {
  Generator g(mix64(mix64(o.seed ^ 0x5041544846494E44ull) ^ static_cast<uint64_t>(i)));
  const Geometry geo(o.size);
  const int distractor_len = std::max(1, o.contour_length / 3);
  const int distractors = 20 / distractor_len;
  for (int attempt = 0; attempt < kImageTries; ++attempt) {
    Occupancy occupied(o.size, geo.clearance);
    std::vector<Path> paths(2);
    std::vector<std::vector<Pt>> points(2);
    if (!place_path(g, geo, o.size, o.contour_length, occupied, paths[0], points[0])) continue;
    if (!place_path(g, geo, o.size, o.contour_length, occupied, paths[1], points[1])) continue;
    // The dots, on the ends of path 0 (positive) or one end of each path (negative). A dot must not
    // touch another path: its edge stays 1 px (scaled) from their lines' edges.
    std::vector<Pt> dots(2);
    if (label == 1) {
      dots[0] = paths[0].front().a;
      dots[1] = paths[0].back().b;
    } else {
      dots[0] = g.next_int(0, 2) == 0 ? paths[0].front().a : paths[0].back().b;
      dots[1] = g.next_int(0, 2) == 0 ? paths[1].front().a : paths[1].back().b;
    }
    const double keep = geo.dot_radius + geo.line_radius + o.size / 32.0;
    if (!far_from({dots[0]}, points[1], keep) || !far_from({dots[1]}, points[label == 1 ? 1 : 0], keep)) continue;
    for (int k = 0; k < distractors; ++k) {
      Path p;
      std::vector<Pt> q;
      if (place_path(g, geo, o.size, distractor_len, occupied, p, q, dots, keep)) paths.push_back(std::move(p));
    }
    return render(o.size, geo, paths, dots);
  }
  fail(str("generate_pathfinder: no room for two paths of ", o.contour_length, " dashes in a ", o.size, "x", o.size,
           " image after ", kImageTries, " tries; lower contour_length or raise size"));
}

std::string encode_grey_png(const std::vector<uint8_t>& grey, int size) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  img.width = static_cast<png_uint_32>(size);
  img.height = static_cast<png_uint_32>(size);
  img.format = PNG_FORMAT_GRAY;
  png_alloc_size_t bytes = 0;
  HH_CHECK(png_image_write_to_memory(&img, nullptr, &bytes, 0, grey.data(), 0, nullptr), "generate_pathfinder: PNG encoding failed: ",
           img.message);
  std::string out(bytes, '\0');
  HH_CHECK(png_image_write_to_memory(&img, out.data(), &bytes, 0, grey.data(), 0, nullptr),
           "generate_pathfinder: PNG encoding failed: ", img.message);
  out.resize(bytes);
  return out;
}

void write_plain(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  HH_CHECK(f.good(), "generate_pathfinder: cannot write ", path);
}

// Exactly n/2 positives (rounded down) in a shuffled order, from the split's own stream.
std::vector<int> balanced_labels(uint64_t seed, int split, int64_t n) {
  std::vector<int> labels(static_cast<size_t>(n), 0);
  for (int64_t k = 0; k < n / 2; ++k) labels[static_cast<size_t>(k)] = 1;
  Generator g(mix64(mix64(seed ^ 0x4C4142454C53ull) + static_cast<uint64_t>(split)));
  for (int64_t k = n - 1; k > 0; --k) std::swap(labels[static_cast<size_t>(k)], labels[static_cast<size_t>(g.next_int(0, k + 1))]);
  return labels;
}

void validate(const PathfinderOptions& o) {
  HH_CHECK(o.train > 0 && o.val > 0 && o.test > 0, "generate_pathfinder: train, val and test must be > 0, got ", o.train,
           ", ", o.val, ", ", o.test);
  HH_CHECK(o.contour_length >= 1 && o.contour_length <= 64, "generate_pathfinder: contour_length must be in 1..64, got ",
           o.contour_length);
  HH_CHECK(o.size >= 16 && o.size <= 512, "generate_pathfinder: size must be in 16..512, got ", o.size);
  HH_CHECK(o.threads >= 0, "generate_pathfinder: threads must be >= 0 (0 = all cores), got ", o.threads);
}

}  // namespace

void generate_pathfinder(const std::string& dir, const PathfinderOptions& o) {
  validate(o);
  const fs::path root = fs::path(dir) / ("curv_contour_length_" + std::to_string(o.contour_length));
  ensure_writable_dir(root.string());
  // A previous run's metadata goes first: until this run's is written the folder reads as empty.
  std::error_code ec;
  fs::remove_all(root / "metadata", ec);
  HH_CHECK(!ec, "generate_pathfinder: cannot remove ", (root / "metadata").string(), ": ", ec.message());
  fs::remove(root / "split_sizes.txt", ec);
  HH_CHECK(!ec, "generate_pathfinder: cannot remove ", (root / "split_sizes.txt").string(), ": ", ec.message());

  const int64_t sizes[3] = {o.train, o.val, o.test};
  const int64_t n = o.train + o.val + o.test;
  std::vector<int> labels;
  for (int s = 0; s < 3; ++s) {
    const std::vector<int> l = balanced_labels(o.seed, s, sizes[s]);
    labels.insert(labels.end(), l.begin(), l.end());
  }
  for (int64_t k = 0; k * kPerFolder < n; ++k) fs::create_directories(root / "imgs" / std::to_string(k));

  parallel_items(n, o.threads, o.progress ? "pathfinder" : "", [&](int64_t i) {
    const std::vector<uint8_t> grey = draw_image(o, i, labels[static_cast<size_t>(i)]);
    const fs::path file = root / "imgs" / std::to_string(i / kPerFolder) / ("sample_" + std::to_string(i % kPerFolder) + ".png");
    write_plain(file.string(), encode_grey_png(grey, o.size));
  });

  // Metadata lines as the release writes them: folder, file name, number, label, then settings
  // (continuity, contour length, distractor length, dash length, line width, gap, contrasts),
  // which readers ignore.
  fs::create_directories(root / "metadata");
  for (int64_t k = 0; k * kPerFolder < n; ++k) {
    std::string text;
    for (int64_t i = k * kPerFolder; i < std::min(n, (k + 1) * kPerFolder); ++i)
      text += str("imgs/", k, " sample_", i % kPerFolder, ".png ", i % kPerFolder, " ", labels[static_cast<size_t>(i)],
                  " ", kMaxTurn, " ", o.contour_length, " ", std::max(1, o.contour_length / 3), " 2 1 1 1\n");
    write_file_atomic((root / "metadata" / (std::to_string(k) + ".npy")).string(), text);
  }
  write_file_atomic((root / "split_sizes.txt").string(),
                    str("train ", o.train, "\nval ", o.val, "\ntest ", o.test, "\n"));
}

}  // namespace hh::data
