// dtrain-ckpt: inspect, verify, compare and export dtrain checkpoints (docs/checkpoint-format.md).
// A single process; it reads files with HDF5's serial driver and needs no mpiexec.
#include <cstdio>
#include <cstring>
#include <string>

#include "commands.hpp"
#include "dtrain/ckpt/file.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/version.hpp"

namespace {

const char* const kUsage =
    "usage: dtrain-ckpt COMMAND ARGS\n"
    "  inspect FILE       tensors, shapes, dtypes, step, configuration, format and library version\n"
    "  verify FILE        recompute every dataset's checksum; exit 1 naming the first bad one\n"
    "  diff A B           max abs difference per tensor, and tensors found in only one file;\n"
    "                     exit 1 when the files differ\n"
    "  export FILE OUT    model tensors to OUT in the safetensors format (PyTorch, numpy)\n"
    "  export --hf FILE DIR\n"
    "                     a GPT as Hugging Face's transformers reads GPT-2: DIR/model.safetensors\n"
    "                     and DIR/config.json (GPT2LMHeadModel.from_pretrained(DIR))\n"
    "  --version          print the version\n"
    "exit status: 0 ok, 1 verify/diff found a problem, 2 usage or I/O error\n";

int usage_error(const char* why) {
  std::fprintf(stderr, "dtrain-ckpt: %s\n%s", why, kUsage);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage_error("missing command");
  const std::string cmd = argv[1];
  const int nargs = argc - 2;
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  if (cmd == "--version") {
    std::printf("dtrain-ckpt %s\n", DTRAIN_VERSION_STRING);
    return 0;
  }
  dtrain::ckpt::stop_hdf5_error_printing();  // each failure is reported once, below
  try {
    if (cmd == "inspect" && nargs == 1) return dtrain_ckpt::inspect(argv[2]);
    if (cmd == "verify" && nargs == 1) return dtrain_ckpt::verify(argv[2]);
    if (cmd == "diff" && nargs == 2) return dtrain_ckpt::diff(argv[2], argv[3]);
    if (cmd == "export" && nargs == 2 && std::strcmp(argv[2], "--hf") != 0)  // (--hf FILE lacks its DIR)
      return dtrain_ckpt::export_safetensors(argv[2], argv[3]);
    if (cmd == "export" && nargs == 3 && std::strcmp(argv[2], "--hf") == 0) {
      return dtrain_ckpt::export_hugging_face(argv[3], argv[4]);
    }
  } catch (const dtrain::Error& e) {
    std::fprintf(stderr, "dtrain-ckpt %s: %s\n", cmd.c_str(), e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dtrain-ckpt %s: %s\n", cmd.c_str(), e.what());
    return 2;
  }
  const bool known = cmd == "inspect" || cmd == "verify" || cmd == "diff" || cmd == "export";
  return usage_error(known ? ("wrong number of arguments for '" + cmd + "'").c_str()
                           : ("unknown command '" + cmd + "'").c_str());
}
