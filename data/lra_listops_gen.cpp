// The ListOps generator (data/lra_generate.h), written from the task's published definition (the
// LRA paper and REFERENCE.md §5): random operator trees, rejection-sampled by length.
//
// A node at depth d < max_depth is an operator with probability 1/4, else a digit 0-9; at
// max_depth it is always a digit. An operator takes 2..max_args arguments (uniform) and is one of
// [MAX, [MIN, [MED (median, truncated to an integer), [SM (sum mod 10), uniform. The root is at
// depth 1. A tree's length is counted as the official generator counts it: 2 per operator (itself
// and its ']') + 1 per digit; a tree is kept when min_len < length < max_len (strictly, as there).
// The label is the tree's value. Trees are unique over all three splits (as the official set is).
//
// Example i (over train, val, test in that order) draws from its own Philox stream, seeded by
// (seed, i, retry), so the files are the same for any thread count: the trees are drawn in
// parallel, then duplicates are redrawn in index order on one thread.
#include <algorithm>
#include <filesystem>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/generator.h"
#include "data/lra_generate.h"
#include "data/parallel_items.h"

namespace hh::data {

namespace {

// Token codes of a drawn tree: the 4 operators, ']', the 10 digits, '(' and ')'.
enum : uint8_t { kMax = 0, kMin = 1, kMed = 2, kSm = 3, kEnd = 4, kDigit0 = 5, kOpen = 15, kClose = 16 };
const char* const kSymbols[] = {"[MAX", "[MIN", "[MED", "[SM", "]", "0", "1", "2", "3", "4", "5", "6", "7", "8", "9",
                                "(", ")"};

uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int apply_op(int op, std::vector<int>& args) {
  switch (op) {
    case kMax: return *std::max_element(args.begin(), args.end());
    case kMin: return *std::min_element(args.begin(), args.end());
    case kMed: {
      std::sort(args.begin(), args.end());
      const size_t n = args.size();
      return n % 2 == 1 ? args[n / 2] : (args[n / 2 - 1] + args[n / 2]) / 2;  // int(np.median)
    }
    default: {
      int s = 0;
      for (int a : args) s += a;
      return s % 10;
    }
  }
}

struct TreeDraw {
  const ListOpsOptions& o;
  Generator& gen;
  std::vector<uint8_t>& codes;  // the official string's tokens, parentheses included
  int64_t length = 0;           // counted as the official generator counts it
  bool too_long = false;

  // Appends the subtree at `depth`, returns its value (meaningless once too_long is set).
  int draw(int depth) {
    if (too_long) return 0;
    if (depth >= o.max_depth || gen.next_uniform() > 0.25) {
      const int v = static_cast<int>(gen.next_int(0, 10));
      codes.push_back(static_cast<uint8_t>(kDigit0 + v));
      length += 1;
      too_long = length >= o.max_len;
      return v;
    }
    const int n = static_cast<int>(gen.next_int(2, o.max_args + 1));
    const int op = static_cast<int>(gen.next_int(0, 4));
    length += 2;
    // The official string of ((((op, a1), a2), ..., an), ']'): n+1 '(' then "op a1 ) a2 ) ... an ) ] )".
    codes.insert(codes.end(), static_cast<size_t>(n + 1), kOpen);
    codes.push_back(static_cast<uint8_t>(op));
    std::vector<int> args;
    args.reserve(static_cast<size_t>(n));
    for (int k = 0; k < n && !too_long; ++k) {
      args.push_back(draw(depth + 1));
      codes.push_back(kClose);
    }
    codes.push_back(kEnd);
    codes.push_back(kClose);
    too_long = too_long || length >= o.max_len;
    return too_long ? 0 : apply_op(op, args);
  }
};

struct Drawn {
  std::vector<uint8_t> codes;
  int value = 0;
};

constexpr int64_t kMaxTries = 20000000;  // trees drawn for one example before giving up

// Draws trees from example i's stream (retry r) until one has an accepted length.
Drawn draw_example(const ListOpsOptions& o, int64_t i, int64_t retry) {
  Generator gen(mix64(mix64(o.seed) ^ mix64(static_cast<uint64_t>(i) * 0x100000001B3ull + static_cast<uint64_t>(retry))));
  Drawn d;
  for (int64_t t = 0; t < kMaxTries; ++t) {
    d.codes.clear();
    TreeDraw td{o, gen, d.codes};
    d.value = td.draw(1);
    if (!td.too_long && td.length > o.min_len) return d;
  }
  fail(str("generate_listops: no tree of length in (", o.min_len, ", ", o.max_len, ") in ", kMaxTries,
           " draws with max_depth ", o.max_depth, " and max_args ", o.max_args, "; widen the length range"));
}

std::string code_key(const std::vector<uint8_t>& c) { return std::string(c.begin(), c.end()); }

void validate(const ListOpsOptions& o) {
  HH_CHECK(o.train > 0 && o.val > 0 && o.test > 0, "generate_listops: train, val and test must be > 0, got ", o.train,
           ", ", o.val, ", ", o.test);
  HH_CHECK(o.max_depth >= 2, "generate_listops: max_depth must be >= 2 (depth 1 is the root), got ", o.max_depth);
  HH_CHECK(o.max_args >= 2, "generate_listops: max_args must be >= 2, got ", o.max_args);
  HH_CHECK(o.min_len >= 0 && o.max_len >= o.min_len + 2, "generate_listops: need 0 <= min_len and min_len + 2 <= max_len",
           " (lengths are kept when min_len < length < max_len), got ", o.min_len, " and ", o.max_len);
  HH_CHECK(o.threads >= 0, "generate_listops: threads must be >= 0 (0 = all cores), got ", o.threads);
  // The longest tree the depth and argument limits allow: L(d) = 2 + max_args * L(d + 1), L(max_depth) = 1.
  double longest = 1;
  for (int d = o.max_depth - 1; d >= 1; --d) longest = 2 + o.max_args * longest;
  HH_CHECK(longest > static_cast<double>(o.min_len), "generate_listops: trees of max_depth ", o.max_depth,
           " and max_args ", o.max_args, " have at most ", longest, " tokens, not more than min_len ", o.min_len);
}

}  // namespace

void generate_listops(const std::string& dir, const ListOpsOptions& o) {
  validate(o);
  ensure_writable_dir(dir);
  const int64_t n = o.train + o.val + o.test;
  std::vector<Drawn> all(static_cast<size_t>(n));
  parallel_items(n, o.threads, o.progress ? "listops" : "",
                 [&](int64_t i) { all[static_cast<size_t>(i)] = draw_example(o, i, 0); });
  // Duplicates (rare at the official lengths) are redrawn from the next retry streams, in order.
  std::unordered_set<std::string> seen;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t retry = 1; !seen.insert(code_key(all[static_cast<size_t>(i)].codes)).second; ++retry) {
      HH_CHECK(retry < 1000, "generate_listops: cannot find ", n, " distinct trees in (", o.min_len, ", ", o.max_len,
               "); widen the length range or ask for fewer");
      all[static_cast<size_t>(i)] = draw_example(o, i, retry);
    }
  }
  // The release's TSV: Python's csv writer, so "\r\n" line ends; tokens separated by one space.
  const char* names[3] = {"basic_train.tsv", "basic_val.tsv", "basic_test.tsv"};
  const int64_t bounds[4] = {0, o.train, o.train + o.val, n};
  for (int s = 0; s < 3; ++s) {
    std::string text = "Source\tTarget\r\n";
    for (int64_t i = bounds[s]; i < bounds[s + 1]; ++i) {
      const Drawn& d = all[static_cast<size_t>(i)];
      for (size_t k = 0; k < d.codes.size(); ++k) {
        if (k > 0) text += ' ';
        text += kSymbols[d.codes[k]];
      }
      text += '\t';
      text += std::to_string(d.value);
      text += "\r\n";
    }
    write_file_atomic((std::filesystem::path(dir) / names[s]).string(), text);
  }
}

}  // namespace hh::data
