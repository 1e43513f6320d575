// test_prepare_data.cu — the prepare_data command line (tools/prepare_data.cu), run as a program: text files
// -> train/val shards (the files' bytes joined by EOT, split by --val-fraction), the token counts printed,
// refusals of bad arguments, and --default (the project's own *.md and sources in sorted order, hidden and
// build folders skipped) writing the same bytes twice.
//
//   test_prepare_data PATH/TO/prepare_data
#include <sys/wait.h>

#include <filesystem>
#include "data/shard.h"
#include "data/tokenizer.h"
#include "test/test_util.h"

namespace fs = std::filesystem;

static int run(const std::string& cmd) {
    int rc = system((cmd + " >" + tmp_path("cli.out") + " 2>" + tmp_path("cli.err")).c_str());
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}
static std::vector<uint16_t> read_shard_or_fail(const std::string& path) {
    std::vector<uint16_t> t;
    std::string err;
    CHECK(read_token_shard(path, t, err), "%s", err.c_str());
    return t;
}

static void test_prepare_data_cli(const std::string& exe) {
    const std::string a = "hello world\nsecond line\n";
    static const char kB[] = "bytes: \x00\xff\xe2\x82\xac end";  // 16 bytes, one of them NUL
    const std::string b = std::string(kB, sizeof kB - 1);
    write_bytes(tmp_path("a.txt"), a);
    write_bytes(tmp_path("b.txt"), b);
    const std::string out = tmp_path("out");
    int rc = run(exe + " --out-dir " + out + " --val-fraction 0.25 " + tmp_path("a.txt") + " " + tmp_path("b.txt"));
    CHECK(rc == 0, "prepare_data failed (%d): %s", rc, read_bytes(tmp_path("cli.err")).c_str());
    std::vector<uint16_t> expect = tokenizer::encode(a);
    expect.push_back((uint16_t)tokenizer::kEOT);
    for (uint16_t t : tokenizer::encode(b)) expect.push_back(t);
    std::vector<uint16_t> train = read_shard_or_fail(out + "/train.bin");
    std::vector<uint16_t> val = read_shard_or_fail(out + "/val.bin");
    const size_t n_val = (size_t)(expect.size() * 0.25);
    CHECK(val.size() == n_val && train.size() == expect.size() - n_val, "split %zu + %zu of %zu", train.size(),
          val.size(), expect.size());
    std::vector<uint16_t> joined = train;
    joined.insert(joined.end(), val.begin(), val.end());
    CHECK(joined == expect, "train ++ val == encode(a) EOT encode(b)");
    std::string printed = read_bytes(tmp_path("cli.out"));
    CHECK(contains(printed, std::to_string(train.size())) && contains(printed, std::to_string(val.size())),
          "token counts printed: %s", printed.c_str());

    rc = run(exe + " --out-dir " + out + " " + tmp_path("no_such_file.txt"));
    CHECK(rc != 0 && contains(read_bytes(tmp_path("cli.err")), "no_such_file.txt"), "missing file: rc %d, %s", rc,
          read_bytes(tmp_path("cli.err")).c_str());
    write_bytes(tmp_path("empty.txt"), "");
    rc = run(exe + " --out-dir " + out + " " + tmp_path("empty.txt"));
    CHECK(rc != 0 && contains(read_bytes(tmp_path("cli.err")), "empty"), "empty input: rc %d, %s", rc,
          read_bytes(tmp_path("cli.err")).c_str());
    rc = run(exe + " " + tmp_path("a.txt"));
    CHECK(rc != 0 && contains(read_bytes(tmp_path("cli.err")), "--out-dir"), "missing --out-dir: rc %d", rc);
    rc = run(exe + " --out-dir " + out + " --val-fraction 1.5 " + tmp_path("a.txt"));
    CHECK(rc != 0, "--val-fraction 1.5 accepted");

    // --default: *.md and sources under --root in sorted order; hidden and build directories skipped.
    const std::string root = tmp_path("repo");
    fs::create_directories(root + "/z");
    fs::create_directories(root + "/a");
    fs::create_directories(root + "/build-x");
    fs::create_directories(root + "/.git");
    write_bytes(root + "/README.md", "# readme\n");
    write_bytes(root + "/z/x.cu", "int x;\n");
    write_bytes(root + "/a/y.h", "#pragma once\n");
    write_bytes(root + "/a/notes.txt", "not part of the corpus\n");
    write_bytes(root + "/build-x/gen.cu", "generated\n");
    write_bytes(root + "/.git/HEAD.md", "hidden\n");
    rc = run(exe + " --default --root " + root + " --val-fraction 0");
    CHECK(rc == 0, "--default failed (%d): %s", rc, read_bytes(tmp_path("cli.err")).c_str());
    std::string corpus = std::string("# readme\n") + "\x01" + "#pragma once\n" + "\x01" + "int x;\n";
    std::vector<uint16_t> want;
    for (char c : corpus) want.push_back(c == '\x01' ? (uint16_t)tokenizer::kEOT : (uint16_t)(unsigned char)c);
    const std::string gen = root + "/data/generated/default";
    std::vector<uint16_t> got = read_shard_or_fail(gen + "/train.bin");
    CHECK(got == want, "--default corpus: got \"%s\"", tokenizer::decode(got).c_str());
    CHECK(read_shard_or_fail(gen + "/val.bin").empty(), "--val-fraction 0: empty val.bin");
    // Deterministic: a second run writes the same bytes (the generated shards themselves are not inputs).
    const std::string first = read_bytes(gen + "/train.bin");
    rc = run(exe + " --default --root " + root + " --val-fraction 0");
    CHECK(rc == 0 && read_bytes(gen + "/train.bin") == first, "--default is deterministic");
}

int main(int argc, char** argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PATH/TO/prepare_data\n", argv[0]);
        return 2;
    }
    tmp_dir_create("test_prepare_data");
    test_prepare_data_cli(argv[1]);
    tmp_dir_finish();
    return test_finish("test_prepare_data");
}
