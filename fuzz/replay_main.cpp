// The main() of a fuzz target built without libFuzzer: runs LLVMFuzzerTestOneInput once on every
// file under the directories (and on the files) given, in name order, so the test suite replays
// the seed and regression corpora in every build, the sanitizer build included. Prints each
// input's path before running it, so a crash names the input. Exits 1 when it found no input at
// all (a corpus that went missing must not pass as an empty one).
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

namespace fs = std::filesystem;

// Regular files under path (path itself when it is one); names starting with '.' are skipped.
void collect_inputs(const fs::path& path, std::vector<fs::path>& inputs) {
  if (fs::is_regular_file(path)) {
    inputs.push_back(path);
    return;
  }
  if (!fs::is_directory(path)) {
    std::fprintf(stderr, "replay: %s is neither a file nor a directory\n", path.c_str());
    std::exit(1);
  }
  for (const fs::directory_entry& entry : fs::recursive_directory_iterator(path)) {
    if (entry.is_regular_file() && entry.path().filename().string().rfind('.', 0) != 0) {
      inputs.push_back(entry.path());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) {
    LLVMFuzzerInitialize(&argc, &argv);
  }
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    collect_inputs(argv[i], inputs);
  }
  std::sort(inputs.begin(), inputs.end());
  if (inputs.empty()) {
    std::fprintf(stderr, "replay: no inputs found; usage: %s DIRECTORY_OR_FILE...\n", argv[0]);
    return 1;
  }
  for (const fs::path& input : inputs) {
    std::fprintf(stderr, "replay: %s\n", input.c_str());
    std::ifstream in(input, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
    if (!in.eof() && in.fail()) {
      std::fprintf(stderr, "replay: cannot read %s\n", input.c_str());
      return 1;
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  }
  std::printf("replay: %zu inputs ran clean\n", inputs.size());
  return 0;
}
