// test_philox.cu — the counter-based random numbers behind every dropout mask (layers/philox.h), CPU only
// (label unit; the GPU kernels' masks are checked bit for bit in test_dropout.cu and test_attention.cu).
//
//  * Philox4x32-10 against the published Random123 known-answer vectors: a mask bit is a pure function of
//    (seed, stream, global index), which is what lets a TP/SP rank draw exactly the single-rank mask of the
//    elements it holds (layers/philox.h says why) — so the generator itself must be the standard one.
//  * dropout_threshold at p = 0, 0.5, 1.
//  * dropout_keep8 (eight mask bits from two or three Philox blocks, the GPU kernels' form) equals
//    dropout_keep bit for bit, at any alignment of the first index.
//  * dropout_keep_run (the CPU's keep bytes of a run of elements, one SIMD loop over Philox blocks) equals
//    dropout_keep at every alignment, for runs of 1 to 1000 elements, at p = 0, 0.3, 1.
#include <cstdint>
#include <vector>
#include "layers/philox.h"
#include "test/test_util.h"

static Ctx g_cpu, g_gpu;

// ---------------------------------------------------------------------------------------------------------
// Philox4x32-10 known answers (Random123's kat_vectors file, "philox4x32 10" lines).
static void test_philox_kat() {
    struct Kat { uint32_t ctr[4], key[2], out[4]; };
    const Kat kats[3] = {
        {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
        {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}, {0xffffffffu, 0xffffffffu},
         {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
        {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}, {0xa4093822u, 0x299f31d0u},
         {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
    };
    for (int k = 0; k < 3; k++) {
        const Kat& t = kats[k];
        PhiloxOut o = philox4x32_10(t.ctr[0], t.ctr[1], t.ctr[2], t.ctr[3], t.key[0], t.key[1]);
        for (int j = 0; j < 4; j++)
            CHECK(o.x[j] == t.out[j], "philox KAT %d word %d: got %08x want %08x", k, j, o.x[j], t.out[j]);
    }
    CHECK(dropout_threshold(0.0f) == 0u, "threshold(0)");
    CHECK(dropout_threshold(0.5f) == 0x80000000u, "threshold(0.5) = %08x", dropout_threshold(0.5f));
    CHECK(dropout_threshold(1.0f) == 0xFFFFFFFFu, "threshold(1)");
}

// dropout_keep8 (one Philox block per four elements, used by the GPU kernels) gives exactly the bits of
// dropout_keep element by element, at any alignment of the first index.
static void test_dropout_keep8() {
    const uint32_t thr = dropout_threshold(0.3f);
    int mismatches = 0;
    for (uint64_t first = 0; first < 40; first++)
        for (uint64_t base : {0ull, 1ull << 33, 123456789ull}) {
            uint32_t bits = dropout_keep8(77, 5, base + first, thr);
            for (int k = 0; k < 8; k++)
                if (((bits >> k) & 1u) != (dropout_keep(77, 5, base + first + k, thr) ? 1u : 0u)) mismatches++;
        }
    CHECK(mismatches == 0, "dropout_keep8 differs from dropout_keep in %d bits", mismatches);
    CHECK(dropout_keep8(77, 5, 3, 0) == 0xFFu, "p = 0 keeps everything");
}

static void test_dropout_keep_run() {
    int mismatches = 0, runs = 0;
    for (float p : {0.0f, 0.3f, 1.0f}) {
        const uint32_t thr = dropout_threshold(p);
        for (uint64_t base : {0ull, 1ull << 33, 123456789ull})
            for (uint64_t first = base; first < base + 5; first++)
                for (int64_t count : {1, 3, 4, 5, 63, 64, 65, 257, 1000}) {
                    std::vector<uint8_t> keep((size_t)count + 1, 9);  // the byte after the run stays 9
                    dropout_keep_run(keep.data(), 77, 5, first, count, thr);
                    for (int64_t i = 0; i < count; i++)
                        if (keep[(size_t)i] != (dropout_keep(77, 5, first + (uint64_t)i, thr) ? 1 : 0)) mismatches++;
                    if (keep[(size_t)count] != 9) mismatches++;
                    runs++;
                }
    }
    CHECK(mismatches == 0, "dropout_keep_run differs from dropout_keep in %d of %d runs' bytes", mismatches, runs);
}

static void cpu_checks() {
    test_philox_kat();
    test_dropout_keep8();
    test_dropout_keep_run();
}

int main(int argc, char** argv) { return run_op_test(argc, argv, "test_philox", g_cpu, g_gpu, cpu_checks, nullptr); }
