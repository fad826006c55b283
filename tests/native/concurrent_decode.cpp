// Concurrency check of the C++ core, built with -fsanitize=thread by
// tests/test_native_concurrency.py (no Python in the process: the sanitizer then sees every
// access of the core).
//
// Usage: concurrent_decode RUNTIME_BLOB TOKEN_LISTS
//   RUNTIME_BLOB  the runtime section of an artifact (what load_runtime takes)
//   TOKEN_LISTS   one line of space-separated token ids per instance; every token is valid
//
// Reference masks come from a serial decode of one runtime. Then, three times, a fresh runtime
// is decoded by four threads at once (each its own matchers, all sharing the runtime's caches)
// while its prewarm runs on a background thread, and by fill_masks_parallel batches from the
// main thread, whose rows alternate between that runtime and a second one. Every mask must
// equal the reference. Prints "fills=N bad=M"; exits 1 on any difference or refused token.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <gramkiln/core.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

std::string read_file(const char* path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

std::vector<std::vector<int64_t>> read_token_lists(const char* path) {
  std::vector<std::vector<int64_t>> lists;
  std::ifstream file(path);
  std::string line;
  while (std::getline(file, line)) {
    std::istringstream fields(line);
    std::vector<int64_t> ids;
    int64_t id;
    while (fields >> id) ids.push_back(id);
    lists.push_back(std::move(ids));
  }
  return lists;
}

}  // namespace

int main(int argc, char** argv) {
  using gramkiln::Matcher;
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s RUNTIME_BLOB TOKEN_LISTS\n", argv[0]);
    return 2;
  }
  const std::string blob = read_file(argv[1]);
  const auto lists = read_token_lists(argv[2]);
  const auto reference_runtime = gramkiln::load_runtime(blob);
  const uint32_t words = gramkiln::runtime_mask_words(*reference_runtime);
  // reference[list][position] = the mask before that token.
  std::vector<std::vector<std::vector<uint32_t>>> reference(lists.size());
  for (size_t l = 0; l < lists.size(); ++l) {
    Matcher matcher(reference_runtime);
    for (const int64_t token : lists[l]) {
      std::vector<uint32_t> mask(words);
      matcher.fill_mask(mask.data());
      reference[l].push_back(std::move(mask));
      if (!matcher.accept_token(token)) {
        std::printf("refused token %lld\n", static_cast<long long>(token));
        return 1;
      }
    }
  }
  std::atomic<long> fills{0}, bad{0};
  for (int round = 0; round < 3; ++round) {
    const auto runtime = gramkiln::load_runtime(blob);
    gramkiln::BackgroundPrewarm prewarm(runtime);
    std::vector<std::thread> workers;
    for (size_t k = 0; k < 4; ++k) {
      workers.emplace_back([&, k] {
        std::vector<uint32_t> mask(words);
        for (size_t i = 0; i < lists.size(); ++i) {
          const size_t l = (i + k) % lists.size();  // threads meet the lists in different orders
          Matcher matcher(runtime);
          for (size_t p = 0; p < lists[l].size(); ++p) {
            matcher.fill_mask(mask.data());
            ++fills;
            if (mask != reference[l][p]) ++bad;
            if (!matcher.accept_token(lists[l][p])) ++bad;
          }
        }
      });
    }
    // The batch's rows alternate between the shared runtime and one of their own, so that its
    // computed rows run on two threads at once (a batch computes one runtime's rows in turn).
    const auto second_runtime = gramkiln::load_runtime(blob);
    std::vector<Matcher> matchers;
    size_t longest = 0;
    for (size_t l = 0; l < lists.size(); ++l) {
      matchers.emplace_back(l % 2 == 0 ? runtime : second_runtime);
      longest = std::max(longest, lists[l].size());
    }
    std::vector<uint32_t> rows_buffer(static_cast<size_t>(words) * lists.size());
    for (size_t p = 0; p < longest; ++p) {
      std::vector<const Matcher*> batch;
      std::vector<uint32_t> rows;
      std::vector<size_t> which;
      for (size_t l = 0; l < lists.size(); ++l) {
        if (p >= lists[l].size()) continue;
        rows.push_back(static_cast<uint32_t>(batch.size()));
        batch.push_back(&matchers[l]);
        which.push_back(l);
      }
      gramkiln::fill_masks_parallel(batch, rows_buffer.data(), words, rows, 2);
      for (size_t r = 0; r < which.size(); ++r) {
        ++fills;
        const uint32_t* row = rows_buffer.data() + r * words;
        if (!std::equal(reference[which[r]][p].begin(), reference[which[r]][p].end(), row)) ++bad;
        if (!matchers[which[r]].accept_token(lists[which[r]][p])) ++bad;
      }
    }
    for (std::thread& worker : workers) worker.join();
    prewarm.wait();
  }
  std::printf("fills=%ld bad=%ld\n", fills.load(), bad.load());
  return bad.load() == 0 ? 0 : 1;
}
