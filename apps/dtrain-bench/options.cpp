#include "options.hpp"

#include <boost/program_options.hpp>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iomanip>
#include <iostream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace po = boost::program_options;

namespace bench {

std::size_t parse_bytes(const std::string& text) {
  // stoull would take "-1" as 2^64 - 1
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0])))
    throw std::invalid_argument("bad size '" + text + "'");
  std::size_t pos = 0;
  unsigned long long value = 0;
  try {
    value = std::stoull(text, &pos);
  } catch (const std::out_of_range&) {
    throw std::invalid_argument("size '" + text + "' is too large (at most 1024G)");
  }
  std::string suffix = text.substr(pos);
  unsigned shift = 0;
  if (suffix == "K" || suffix == "k" || suffix == "KiB") shift = 10;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB") shift = 20;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB") shift = 30;
  else if (!suffix.empty() && suffix != "B") throw std::invalid_argument("bad size '" + text + "'");
  // (beyond any host's memory, and where the size steps' doubles stay exact)
  constexpr unsigned kLargestShift = 40;
  if (value > (1ull << (kLargestShift - shift)))
    throw std::invalid_argument("size '" + text + "' is too large (at most 1024G)");
  return static_cast<std::size_t>(value) << shift;
}

namespace {
const char* redop_name(dtrain::ReduceOp op) {
  switch (op) {
    case dtrain::ReduceOp::sum: return "sum";
    case dtrain::ReduceOp::avg: return "avg";
    case dtrain::ReduceOp::max: return "max";
    case dtrain::ReduceOp::min: return "min";
  }
  return "?";
}
}  // namespace

std::string settings_text(const Options& o) {
  std::ostringstream os;
  os.precision(17);
  os << "op = ";
  for (const std::string& op : o.ops) os << op << " ";
  os << "\nmin-bytes = " << o.min_bytes << "\nmax-bytes = " << o.max_bytes
     << "\nstep-factor = " << o.step_factor << "\niters = " << o.iters << "\nwarmup = " << o.warmup
     << "\ndtype = " << dtrain::dtype_name(o.dtype) << "\nredop = " << redop_name(o.redop)
     << "\nroot = " << o.root << "\ncheck = " << o.check << "\nbaseline = " << o.baseline
     << "\nmemcpy = " << o.memcpy_only << "\n";
  return os.str();
}

std::size_t largest_stepped_size(const Options& o) {
  const double top = static_cast<double>(o.max_bytes) * kSizeSlack;
  double size = static_cast<double>(o.min_bytes);
  // The exponent by logarithms, then corrected by a step either way for their rounding.
  double steps = std::floor(std::log(top / size) / std::log(o.step_factor));
  while (steps > 0 && size * std::pow(o.step_factor, steps) > top) steps -= 1;
  while (size * std::pow(o.step_factor, steps + 1) <= top) steps += 1;
  return static_cast<std::size_t>(size * std::pow(o.step_factor, std::max(steps, 0.0)));
}

std::size_t buffer_bytes(const Options& o) {
  return static_cast<std::size_t>(std::ceil(static_cast<double>(o.max_bytes) * kSizeSlack)) + 64;
}

namespace {
dtrain::ReduceOp parse_redop(const std::string& s) {
  for (auto op : {dtrain::ReduceOp::sum, dtrain::ReduceOp::avg, dtrain::ReduceOp::max,
                  dtrain::ReduceOp::min})
    if (s == dtrain::reduce_op_name(op)) return op;
  throw std::invalid_argument("unknown reduction '" + s + "' (sum, avg, max, min)");
}
// --check compares with exact closed forms (values.hpp): the largest reduction result, 5 x
// n(n+1)/2 for sum and avg, 5 n for max, must be an integer the dtype holds exactly.
void check_exact(const Options& o, int ranks) {
  const bool reduces = std::find(o.ops.begin(), o.ops.end(), "all_reduce") != o.ops.end() ||
                       std::find(o.ops.begin(), o.ops.end(), "reduce_scatter") != o.ops.end();
  if (!reduces) return;
  const double n = ranks;
  const double largest = (o.redop == dtrain::ReduceOp::sum || o.redop == dtrain::ReduceOp::avg) ? 5 * n * (n + 1) / 2 : 5 * n;
  double exact = 0;  // every integer up to this is held exactly
  switch (o.dtype) {
    case dtrain::DType::u8: exact = 255; break;
    case dtrain::DType::bf16: exact = 256; break;
    case dtrain::DType::f16: exact = 2048; break;
    case dtrain::DType::f32: exact = 16777216; break;
    case dtrain::DType::i32: exact = 2147483647; break;
    case dtrain::DType::f64: case dtrain::DType::i64: exact = 9007199254740992; break;
  }
  if (largest > exact)
    throw std::invalid_argument("--check: the expected " + std::string(dtrain::reduce_op_name(o.redop)) +
                                " at " + std::to_string(ranks) + " ranks reaches " +
                                std::to_string(static_cast<long long>(largest)) + ", beyond the integers " +
                                dtrain::dtype_name(o.dtype) + " holds exactly (" +
                                std::to_string(static_cast<long long>(exact)) + "): use fewer ranks or another -d");
}

}  // namespace

ParseResult parse_options(int argc, char** argv, Options& out, int ranks, std::string& help_text) {
  std::string op = "all_reduce", min_bytes = "4", max_bytes = "256M", dtype = "f32",
              redop = "sum";
  po::options_description desc(
      "dtrain-bench: time dtrain's collectives (nccl-tests style).\n"
      "Run it under mpiexec, e.g.  mpiexec -n 2 dtrain-bench --op all_reduce --baseline\n"
      "Options");
  desc.add_options()
      ("help,h", "print this help")
      ("op,o", po::value(&op)->default_value(op),
       "all_reduce, all_gather, reduce_scatter, broadcast or all")
      ("min-bytes,b", po::value(&min_bytes)->default_value(min_bytes), "smallest size (K/M/G suffixes)")
      ("max-bytes,e", po::value(&max_bytes)->default_value(max_bytes), "largest size (K/M/G suffixes)")
      ("step-factor,f", po::value(&out.step_factor)->default_value(out.step_factor),
       "multiply the size by this between lines")
      ("iters,n", po::value(&out.iters)->default_value(out.iters), "timed iterations per size (median reported)")
      ("warmup,w", po::value(&out.warmup)->default_value(out.warmup), "untimed iterations per size")
      ("dtype,d", po::value(&dtype)->default_value(dtype), "f32, f64, bf16, f16, i32, i64, u8")
      ("redop", po::value(&redop)->default_value(redop), "sum, avg, max or min")
      ("root,r", po::value(&out.root)->default_value(out.root), "broadcast root")
      ("check,c", po::bool_switch(&out.check),
       "verify the results and print a #wrong column (elements that differ from the expected "
       "values, summed over the ranks); exit status 1 if any")
      ("baseline", po::bool_switch(&out.baseline),
       "all_reduce: also time raw MPI_Allreduce on the same buffers, interleaved, and print "
       "the ratio t_mpi / t_dtrain (median of per-iteration pairs)")
      ("memcpy", po::bool_switch(&out.memcpy_only),
       "only measure one core's memcpy bandwidth over the size range (the physical ceiling)");
  {
    po::variables_map vm;
    // Words that are not options are collected, to be refused by name (not ignored).
    std::vector<std::string> stray;
    po::options_description all;
    all.add(desc).add_options()("stray", po::value(&stray));
    po::positional_options_description words;
    words.add("stray", -1);
    // Whole option names only, as dtrain-gpt takes them.
    const int style = po::command_line_style::default_style & ~po::command_line_style::allow_guessing;
    po::store(po::command_line_parser(argc, argv).options(all).positional(words).style(style).run(), vm);
    if (vm.count("help")) {
      std::ostringstream text;
      text << desc << "\n";
      help_text = text.str();
      return ParseResult::help;
    }
    po::notify(vm);
    if (!stray.empty()) throw std::invalid_argument("unexpected argument '" + stray.front() + "'");
    out.ops = op == "all" ? std::vector<std::string>{"all_reduce", "all_gather", "reduce_scatter",
                                                      "broadcast"}
                          : std::vector<std::string>{op};
    for (const std::string& o : out.ops)
      if (o != "all_reduce" && o != "all_gather" && o != "reduce_scatter" && o != "broadcast")
        throw std::invalid_argument("unknown --op '" + o + "'");
    out.min_bytes = parse_bytes(min_bytes);
    out.max_bytes = parse_bytes(max_bytes);
    out.dtype = dtrain::parse_dtype(dtype);
    out.redop = parse_redop(redop);
    if (out.min_bytes == 0 || out.min_bytes > out.max_bytes)
      throw std::invalid_argument("need 0 < --min-bytes <= --max-bytes");
    if (!(out.step_factor > 1.0) || !std::isfinite(out.step_factor))
      throw std::invalid_argument("--step-factor must be a finite number above 1");
    const double steps = std::log(static_cast<double>(out.max_bytes) / static_cast<double>(out.min_bytes)) /
                         std::log1p(out.step_factor - 1.0);
    if (steps > kMaxSteps) {
      std::ostringstream why;
      why << "--step-factor " << std::setprecision(17) << out.step_factor << " takes about "
          << std::setprecision(3) << steps << " steps from --min-bytes to --max-bytes; at most "
          << static_cast<long>(kMaxSteps) << " (use a larger factor)";
      throw std::invalid_argument(why.str());
    }
    if (out.memcpy_only && (out.check || out.baseline || !vm["op"].defaulted()))
      throw std::invalid_argument("--memcpy times memcpy alone: --op, --check and --baseline do not apply");
    const std::size_t element = dtrain::dtype_size(out.dtype);
    // Each collective's message: all_gather and reduce_scatter need one element a rank, and
    // some size of the range (as the runs step through it) must hold one.
    for (const std::string& o : out.memcpy_only ? std::vector<std::string>{} : out.ops) {
      const std::size_t least = element * ((o == "all_gather" || o == "reduce_scatter") ? ranks : 1);
      if (largest_stepped_size(out) < least)
        throw std::invalid_argument("--min-bytes " + std::to_string(out.min_bytes) + " to --max-bytes " +
                                    std::to_string(out.max_bytes) + " by --step-factor holds no " + o +
                                    " message of " + dtrain::dtype_name(out.dtype) + " (at least " +
                                    std::to_string(least) + " bytes at " + std::to_string(ranks) + " ranks)");
    }
    if (out.check && !out.memcpy_only) check_exact(out, ranks);
    // Each timed iteration keeps its time (and the baseline's) until the median is taken.
    if (out.iters < 1 || out.iters > 1000000 || out.warmup < 0)
      throw std::invalid_argument("need --iters in [1, 1000000], --warmup >= 0");
    if (out.root < 0 || out.root >= ranks)
      throw std::invalid_argument("--root " + std::to_string(out.root) + " is not a rank (0.." +
                                  std::to_string(ranks - 1) + ")");
    if (out.baseline) {  // raw MPI_Allreduce on the same buffers
      if (out.ops != std::vector<std::string>{"all_reduce"})
        throw std::invalid_argument("--baseline compares all_reduce only");
      if (out.dtype == dtrain::DType::bf16 || out.dtype == dtrain::DType::f16)
        throw std::invalid_argument("--baseline: MPI has no 16-bit float type");
      if (out.redop == dtrain::ReduceOp::avg) throw std::invalid_argument("--baseline: MPI has no avg reduction");
    }
  }
  return ParseResult::run;
}

}  // namespace bench
