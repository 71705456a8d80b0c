// The restricted unpickler (see torch_pickle.h). A stack machine over indices into one value
// arena: memo entries and stack slots are indices, so a value is never copied and a pickle that
// builds a cycle (a list appended into itself) owns no reference cycle. Opcode meanings follow
// CPython's Lib/pickletools.py; only the ones a state dict needs are accepted.
#include "core/torch_pickle.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "core/checked.h"
#include "core/error.h"
#include "core/utf8.h"

namespace hh::torch_pickle {

namespace {

// Text from the file for a message: printable ASCII kept, the rest escaped, cut when long.
std::string shown(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size() && i < 100; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\'') {
      out += static_cast<char>(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (s.size() > 100) out += "...";
  return out;
}

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::none: return "None";
    case Kind::boolean: return "a bool";
    case Kind::integer: return "an int";
    case Kind::big_integer: return "a big int";
    case Kind::floating: return "a float";
    case Kind::string: return "a string";
    case Kind::tuple: return "a tuple";
    case Kind::list: return "a list";
    case Kind::dict: return "a dict";
    case Kind::global: return "a global";
    case Kind::storage: return "a storage";
    case Kind::tensor: return "a tensor";
  }
  return "?";
}

bool storage_dtype(const std::string& name, DType* out) {
  static const std::pair<const char*, DType> table[] = {
      {"FloatStorage", DType::f32},  {"HalfStorage", DType::f16}, {"BFloat16Storage", DType::bf16},
      {"DoubleStorage", DType::f64}, {"LongStorage", DType::i64}, {"IntStorage", DType::i32},
      {"ByteStorage", DType::u8},    {"BoolStorage", DType::boolean}};
  for (const auto& [n, t] : table) {
    if (name == n) {
      *out = t;
      return true;
    }
  }
  return false;
}

class Machine {
 public:
  Machine(const unsigned char* data, uint64_t size, uint64_t start) : d_(data), size_(size), pos_(start) {}

  Pickle run() {
    HH_CHECK(pos_ <= size_, "pickle: starts at byte ", pos_, ", past the end of its ", size_, " bytes");
    for (;;) {
      op_at_ = pos_;
      if (pos_ >= size_) bad("the pickle ends without a STOP opcode (truncated?)");
      const unsigned char op = d_[pos_++];
      if (op == '.') break;
      step(op);
    }
    HH_CHECK(marks_.empty(), "pickle byte ", op_at_, ": STOP with an open MARK");
    if (stack_.size() != 1) bad(str("STOP with ", stack_.size(), " values on the stack (expected 1)"));
    Pickle p;
    p.root = stack_.back();
    p.end = pos_;
    p.values = std::move(v_);
    return p;
  }

 private:
  const unsigned char* d_;
  uint64_t size_, pos_, op_at_ = 0;
  std::vector<Value> v_;
  std::vector<uint32_t> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint32_t, uint32_t> memo_;

  [[noreturn]] void bad(const std::string& what) const { fail(str("pickle byte ", op_at_, ": ", what)); }

  // --- reading the opcode stream ---
  const unsigned char* take(uint64_t n) {
    if (n > size_ - pos_) bad(str("an argument of ", n, " bytes runs past the end of the pickle (", size_ - pos_,
                                  " bytes left)"));
    const unsigned char* p = d_ + pos_;
    pos_ += n;
    return p;
  }
  uint64_t uint_le(int n) {
    const unsigned char* p = take(static_cast<uint64_t>(n));
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
    return v;
  }
  std::string line() {  // GLOBAL's "module\n" and "name\n"
    const uint64_t begin = pos_;
    const void* nl = std::memchr(d_ + pos_, '\n', static_cast<size_t>(size_ - pos_));
    if (!nl) bad("GLOBAL's text has no newline before the end of the pickle");
    pos_ = static_cast<uint64_t>(static_cast<const unsigned char*>(nl) - d_) + 1;
    return std::string(reinterpret_cast<const char*>(d_ + begin), static_cast<size_t>(pos_ - 1 - begin));
  }

  // --- values ---
  uint32_t make(Value v) {
    if (v_.size() >= kMaxValues) bad(str("more than ", kMaxValues, " values"));
    v_.push_back(std::move(v));
    return static_cast<uint32_t>(v_.size() - 1);
  }
  uint32_t make(Kind k) {
    Value v;
    v.kind = k;
    return make(std::move(v));
  }
  void push(uint32_t i) { stack_.push_back(i); }
  uint32_t pop() {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) bad("pops a value from an empty stack (or across a MARK)");
    const uint32_t i = stack_.back();
    stack_.pop_back();
    return i;
  }
  uint32_t& top() {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() <= floor) bad("needs a value on an empty stack (or across a MARK)");
    return stack_.back();
  }
  // The values pushed since the last MARK, which is removed.
  std::vector<uint32_t> pop_mark() {
    if (marks_.empty()) bad("needs a MARK but none is open");
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<uint32_t> items(stack_.begin() + static_cast<std::ptrdiff_t>(m), stack_.end());
    stack_.resize(m);
    return items;
  }
  int depth_of(const std::vector<uint32_t>& items) const {
    int d = 0;
    for (uint32_t i : items) d = std::max(d, v_[i].depth);
    return d;
  }
  void check_depth(int d) const {
    if (d > kMaxDepth) bad(str("values nested more than ", kMaxDepth, " deep"));
  }
  uint32_t container(Kind k, std::vector<uint32_t> items) {
    const int d = depth_of(items) + 1;
    check_depth(d);
    Value v;
    v.kind = k;
    v.items = std::move(items);
    v.depth = d;
    return make(std::move(v));
  }
  // Adds items to a list (APPEND/APPENDS) or key/value pairs to a dict (SETITEM/SETITEMS).
  void extend(uint32_t target, Kind want, const std::vector<uint32_t>& items, const char* opname) {
    Value& t = v_[target];
    if (t.kind != want)
      bad(str(opname, " on ", kind_name(t.kind), " (only a ", want == Kind::list ? "list" : "dict", ")"));
    if (want == Kind::dict && items.size() % 2 != 0) bad(str(opname, " with an odd number of keys and values"));
    const int d = std::max(t.depth, depth_of(items) + 1);
    check_depth(d);
    v_[target].depth = d;
    v_[target].items.insert(v_[target].items.end(), items.begin(), items.end());
  }
  void memo_put(uint64_t key) {
    const uint32_t value = top();
    if (memo_.size() >= kMaxValues && !memo_.count(static_cast<uint32_t>(key)))
      bad(str("more than ", kMaxValues, " memo entries"));
    memo_[static_cast<uint32_t>(key)] = value;
  }
  void memo_get(uint64_t key) {
    auto it = memo_.find(static_cast<uint32_t>(key));
    if (it == memo_.end()) bad(str("reads memo slot ", key, ", which was never written"));
    push(it->second);
  }
  uint32_t string_value(const unsigned char* p, uint64_t n) {
    if (first_invalid_utf8(reinterpret_cast<const char*>(p), static_cast<size_t>(n)) != std::string::npos) bad("a string that is not valid UTF-8");
    Value v;
    v.kind = Kind::string;
    v.text.assign(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
    return make(std::move(v));
  }

  uint32_t global(const std::string& module, const std::string& name) {
    Value v;
    v.kind = Kind::global;
    if (module == "collections" && name == "OrderedDict") {
      v.global = Global::ordered_dict;
    } else if (module == "torch._utils" && name == "_rebuild_tensor_v2") {
      v.global = Global::rebuild_tensor_v2;
    } else if (module == "torch._utils" && name == "_rebuild_parameter") {
      v.global = Global::rebuild_parameter;
    } else if (module == "torch" && storage_dtype(name, &v.dtype)) {
      v.global = Global::storage_type;
    } else {
      bad(str("GLOBAL '", shown(module), " ", shown(name),
              "' is not allowed: a state dict needs only collections.OrderedDict, torch._utils._rebuild_tensor_v2, "
              "torch._utils._rebuild_parameter and torch.*Storage types (reading a checkpoint never runs its code)"));
    }
    v.text = module + "." + name;
    return make(std::move(v));
  }

  // --- the checks of what REDUCE and BINPERSID build ---
  const Value& arg(const std::vector<uint32_t>& args, size_t i) const { return v_[args[i]]; }
  int64_t int_arg(const Value& v, const char* what) const {
    if (v.kind != Kind::integer) bad(str(what, " is ", kind_name(v.kind), ", not an int"));
    if (v.integer < 0) bad(str(what, " is negative (", v.integer, ")"));
    return v.integer;
  }
  std::vector<int64_t> int_tuple(const Value& v, const char* what) const {
    if (v.kind != Kind::tuple) bad(str(what, " is ", kind_name(v.kind), ", not a tuple"));
    if (v.items.size() > kMaxDims) bad(str(what, " has ", v.items.size(), " dimensions (at most ", kMaxDims, ")"));
    std::vector<int64_t> out;
    for (uint32_t i : v.items) out.push_back(int_arg(v_[i], what));
    return out;
  }

  uint32_t persistent(uint32_t pid_index) {
    const Value& pid = v_[pid_index];
    if (pid.kind != Kind::tuple || (pid.items.size() != 5 && pid.items.size() != 6))
      bad(str("BINPERSID's id is ", kind_name(pid.kind), " of ", pid.items.size(),
              " items, not ('storage', storage type, key, location, size)"));
    const Value& tag = arg(pid.items, 0);
    const Value& type = arg(pid.items, 1);
    const Value& key = arg(pid.items, 2);
    const Value& loc = arg(pid.items, 3);
    if (tag.kind != Kind::string || tag.text != "storage") bad("BINPERSID's id does not start with 'storage'");
    if (type.kind != Kind::global || type.global != Global::storage_type)
      bad("BINPERSID's storage type is not one of torch's storage types");
    if (key.kind != Kind::string || loc.kind != Kind::string) bad("BINPERSID's storage key or location is not a string");
    if (pid.items.size() == 6 && arg(pid.items, 5).kind != Kind::none)
      bad("BINPERSID's storage has view metadata (storage views of the pre-1.0 format are not supported)");
    Value s;
    s.kind = Kind::storage;
    s.dtype = type.dtype;
    s.text = key.text;
    s.integer = int_arg(arg(pid.items, 4), "the storage's element count");
    return make(std::move(s));
  }

  uint32_t rebuild_tensor(const std::vector<uint32_t>& args) {
    // _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad, backward_hooks[, metadata])
    if (args.size() != 6 && args.size() != 7)
      bad(str("_rebuild_tensor_v2 takes 6 or 7 arguments, got ", args.size()));
    const Value& st = arg(args, 0);
    if (st.kind != Kind::storage) bad(str("_rebuild_tensor_v2's first argument is ", kind_name(st.kind), ", not a storage"));
    Value t;
    t.kind = Kind::tensor;
    t.storage = args[0];
    t.dtype = st.dtype;
    t.integer = int_arg(arg(args, 1), "the tensor's storage offset");
    t.size = int_tuple(arg(args, 2), "the tensor's size");
    t.stride = int_tuple(arg(args, 3), "the tensor's stride");
    if (t.size.size() != t.stride.size())
      bad(str("the tensor's size has ", t.size.size(), " dimensions but its stride ", t.stride.size()));
    if (arg(args, 4).kind != Kind::boolean) bad("_rebuild_tensor_v2's requires_grad is not a bool");
    if (arg(args, 5).kind != Kind::dict) bad("_rebuild_tensor_v2's backward hooks are not an OrderedDict");
    // Inside the storage: offset + sum((size - 1) * stride) < element count (checked arithmetic).
    int64_t numel = 1;
    for (int64_t s : t.size) numel = checked_mul(numel, s, "the tensor's element count");
    if (numel == 0) {
      if (t.integer > st.integer)
        bad(str("the tensor's storage offset ", t.integer, " is past its storage's ", st.integer, " elements"));
    } else {
      int64_t last = t.integer;
      for (size_t i = 0; i < t.size.size(); ++i)
        last = checked_add(last, checked_mul(t.size[i] - 1, t.stride[i], "the tensor's extent"), "the tensor's extent");
      if (last >= st.integer)
        bad(str("the tensor (offset ", t.integer, ", ", numel, " elements) reaches element ", last,
                " of a storage of ", st.integer, " elements"));
    }
    return make(std::move(t));
  }

  uint32_t reduce(uint32_t callable, uint32_t args_index) {
    const Value& f = v_[callable];
    const Value& a = v_[args_index];
    if (f.kind != Kind::global) bad(str("REDUCE calls ", kind_name(f.kind), " (only allowed globals are called)"));
    if (a.kind != Kind::tuple) bad(str("REDUCE's arguments are ", kind_name(a.kind), ", not a tuple"));
    const std::vector<uint32_t> args = a.items;
    switch (f.global) {
      case Global::ordered_dict:
        if (!args.empty()) bad("OrderedDict is called with arguments (only OrderedDict() is accepted)");
        return container(Kind::dict, {});
      case Global::rebuild_tensor_v2: return rebuild_tensor(args);
      case Global::rebuild_parameter:
        // _rebuild_parameter(data, requires_grad, backward_hooks): the tensor itself.
        if (args.size() != 3 || arg(args, 0).kind != Kind::tensor || arg(args, 1).kind != Kind::boolean)
          bad("_rebuild_parameter takes (tensor, requires_grad, backward_hooks)");
        return args[0];
      case Global::storage_type: break;
    }
    bad(str("REDUCE calls ", f.text, ", which is only accepted inside a storage id"));
  }

  void step(unsigned char op) {
    switch (op) {
      case 0x80: {  // PROTO
        const uint64_t p = uint_le(1);
        if (p < 2 || p > 5) bad(str("pickle protocol ", p, " (2 to 5 are read)"));
        return;
      }
      case 0x95: {  // FRAME: a length prefix only
        const uint64_t n = uint_le(8);
        if (n > size_ - pos_) bad(str("a frame of ", n, " bytes runs past the end of the pickle"));
        return;
      }
      case '(':  // MARK
        if (marks_.size() >= static_cast<size_t>(kMaxDepth)) bad(str("MARKs nested more than ", kMaxDepth, " deep"));
        marks_.push_back(stack_.size());
        return;
      case '}': push(container(Kind::dict, {})); return;   // EMPTY_DICT
      case ']': push(container(Kind::list, {})); return;   // EMPTY_LIST
      case ')': push(container(Kind::tuple, {})); return;  // EMPTY_TUPLE
      case 'N': push(make(Kind::none)); return;            // NONE
      case 0x88:                                           // NEWTRUE
      case 0x89: {                                         // NEWFALSE
        Value v;
        v.kind = Kind::boolean;
        v.boolean = op == 0x88;
        push(make(std::move(v)));
        return;
      }
      case 'J':  // BININT: signed 4 bytes
      case 'K':  // BININT1: unsigned 1 byte
      case 'M': {  // BININT2: unsigned 2 bytes
        Value v;
        v.kind = Kind::integer;
        v.integer = op == 'J' ? static_cast<int32_t>(uint_le(4)) : static_cast<int64_t>(uint_le(op == 'K' ? 1 : 2));
        push(make(std::move(v)));
        return;
      }
      case 0x8a: {  // LONG1: n bytes, little-endian two's complement
        const uint64_t n = uint_le(1);
        const unsigned char* p = take(n);
        Value v;
        if (n <= 8) {
          uint64_t u = 0;
          for (uint64_t i = n; i-- > 0;) u = (u << 8) | p[i];
          if (n > 0 && n < 8 && (p[n - 1] & 0x80)) u |= ~uint64_t(0) << (8 * n);  // sign-extend
          v.kind = Kind::integer;
          v.integer = static_cast<int64_t>(u);
        } else {
          v.kind = Kind::big_integer;
          v.text.assign(reinterpret_cast<const char*>(p), static_cast<size_t>(n));
        }
        push(make(std::move(v)));
        return;
      }
      case 'G': {  // BINFLOAT: big-endian double
        const unsigned char* p = take(8);
        uint64_t u = 0;
        for (int i = 0; i < 8; ++i) u = (u << 8) | p[i];
        Value v;
        v.kind = Kind::floating;
        std::memcpy(&v.floating, &u, 8);
        push(make(std::move(v)));
        return;
      }
      case 'X': {  // BINUNICODE
        const uint64_t n = uint_le(4);
        push(string_value(take(n), n));
        return;
      }
      case 0x8c: {  // SHORT_BINUNICODE
        const uint64_t n = uint_le(1);
        push(string_value(take(n), n));
        return;
      }
      case 0x8d: {  // BINUNICODE8
        const uint64_t n = uint_le(8);
        push(string_value(take(n), n));
        return;
      }
      case 't': push(container(Kind::tuple, pop_mark())); return;  // TUPLE
      case 0x85:                                                   // TUPLE1
      case 0x86:                                                   // TUPLE2
      case 0x87: {                                                 // TUPLE3
        std::vector<uint32_t> items(static_cast<size_t>(op - 0x84));
        for (size_t i = items.size(); i-- > 0;) items[i] = pop();
        push(container(Kind::tuple, std::move(items)));
        return;
      }
      case 'l': push(container(Kind::list, pop_mark())); return;  // LIST
      case 'd': {                                                 // DICT
        std::vector<uint32_t> items = pop_mark();
        if (items.size() % 2 != 0) bad("DICT with an odd number of keys and values");
        push(container(Kind::dict, std::move(items)));
        return;
      }
      case 'a': {  // APPEND
        const uint32_t x = pop();
        extend(top(), Kind::list, {x}, "APPEND");
        return;
      }
      case 'e': {  // APPENDS
        const std::vector<uint32_t> items = pop_mark();
        extend(top(), Kind::list, items, "APPENDS");
        return;
      }
      case 's': {  // SETITEM
        const uint32_t value = pop();
        const uint32_t key = pop();
        extend(top(), Kind::dict, {key, value}, "SETITEM");
        return;
      }
      case 'u': {  // SETITEMS
        const std::vector<uint32_t> items = pop_mark();
        extend(top(), Kind::dict, items, "SETITEMS");
        return;
      }
      case 'c': {  // GLOBAL "module\nname\n"
        const std::string module = line();
        const std::string name = line();
        push(global(module, name));
        return;
      }
      case 0x93: {  // STACK_GLOBAL: module and name strings on the stack
        const uint32_t name = pop();
        const uint32_t module = pop();
        if (v_[module].kind != Kind::string || v_[name].kind != Kind::string) bad("STACK_GLOBAL of non-strings");
        push(global(v_[module].text, v_[name].text));
        return;
      }
      case 'Q': push(persistent(pop())); return;  // BINPERSID
      case 'R': {                                 // REDUCE
        const uint32_t args = pop();
        const uint32_t f = pop();
        push(reduce(f, args));
        return;
      }
      case 'b': {  // BUILD: an OrderedDict's attributes (a state dict's _metadata), ignored
        const uint32_t state = pop();
        (void)state;
        const Value& obj = v_[top()];
        if (obj.kind != Kind::dict) bad(str("BUILD on ", kind_name(obj.kind), " (only an OrderedDict's attributes)"));
        return;
      }
      case 'q': memo_put(uint_le(1)); return;   // BINPUT
      case 'r': memo_put(uint_le(4)); return;   // LONG_BINPUT
      case 0x94: memo_put(memo_.size()); return;  // MEMOIZE
      case 'h': memo_get(uint_le(1)); return;   // BINGET
      case 'j': memo_get(uint_le(4)); return;   // LONG_BINGET
      case '0': pop(); return;                  // POP
      case '1': pop_mark(); return;             // POP_MARK
      default: break;
    }
    static const char* hex = "0123456789abcdef";
    const bool printable = op >= 0x20 && op < 0x7f;
    bad(str("opcode 0x", hex[op >> 4], hex[op & 15], printable ? str(" ('", static_cast<char>(op), "')") : "",
            " is not accepted (a restricted unpickler: only the opcodes torch.save writes for a state dict)"));
  }
};

}  // namespace

Pickle unpickle(const unsigned char* data, uint64_t size, uint64_t start) { return Machine(data, size, start).run(); }

}  // namespace hh::torch_pickle
