// The sparse conv's kernel choice as a table, on the CPU: the shapes the benchmarks and TRELLIS.2 run
// (sphere shells of R = 1024, 512, 256 and the decoder's levels) × the GPUs frugal meets → the variant
// and tiling the rules pick; forced choices refused where they cannot run; the halo kernel only for a
// map whose statistics say its rows fit.
#include <gtest/gtest.h>

#include <string>

#include "core/spconv_choose.h"
#include "testing.h"

namespace frugal::spconv {
namespace {

using V = ConvVariant;
using testing::expect_error;

const DeviceCaps h200 = DeviceCaps::gpu(9, 0, 132, true);
const DeviceCaps a100 = DeviceCaps::gpu(8, 0, 108);
const DeviceCaps a6000 = DeviceCaps::gpu(8, 6, 84);
const DeviceCaps l40 = DeviceCaps::gpu(8, 9, 128);
const DeviceCaps rtx50 = DeviceCaps::gpu(12, 0, 170);
const DeviceCaps b200 = DeviceCaps::gpu(10, 0, 148);
const DeviceCaps h100_no90a = DeviceCaps::gpu(9, 0, 132, false);  // a build without sm_90a code
const DeviceCaps cpu{};

// A conv's arguments as the rules see them: sizes, dtype, K; the pointers null (16-byte aligned).
backend::ConvArgs args(int64_t n, int ci, int co, DType dt = DType::f16, int k = 27) {
  backend::ConvArgs a;
  a.n = n;
  a.ci = ci;
  a.co = co;
  a.k = k;
  a.dtype = dt;
  return a;
}

// A map's statistics: every sample tile fits the halo (fits), none does (misfits), or none known (user).
enum class Stats { fits, misfits, user };
MapStats stats_for(int64_t n, Stats s, int k = 27) {
  MapStats m;
  m.rows = n;
  m.offsets = k;
  m.valid = true;
  m.halo_samples = halo_samples(n);
  for (auto& row : m.halo_fits)
    for (int& f : row) f = s == Stats::fits ? m.halo_samples : 0;
  return m;
}
ConvChoice pick(const backend::ConvArgs& a, const DeviceCaps& caps, Stats s) {
  const MapStats m = stats_for(a.n, s, a.k);
  return choose(a, caps, s == Stats::user ? nullptr : &m);
}

struct Row {
  const char* shape;
  int64_t n;
  int ci, co;
  DeviceCaps caps;
  Stats stats;
  ConvChoice want;
};

// R = 1024, 512, 256: the sphere shells of the benchmarks (bench/shells.py); Tnnn: the TRELLIS.2
// decoder's levels (shells of that resolution) and their C → 4C upsampling convs. mma's 256-wide
// tiles need the shared memory of 9.0 or 10.x: 8.0, 8.6, 8.9 and 12.0 take 128-wide ones.
const Row kTable[] = {
    {"R1024 C64", 4643936, 64, 64, h200, Stats::fits, {V::halo_pipe, 64, 128, false, 1, 4643936}},
    {"R1024 C64", 4643936, 64, 64, h200, Stats::misfits, {V::wgmma_ws2, 64, 128, false, 1, 4643936}},
    {"R1024 C64", 4643936, 64, 64, h200, Stats::user, {V::wgmma_ws2, 64, 128, false, 1, 4643936}},
    {"R1024 C64", 4643936, 64, 64, a100, Stats::fits, {V::mma, 64, 128, true, 1, 4194304}},
    {"R1024 C64", 4643936, 64, 64, a6000, Stats::fits, {V::mma, 64, 128, true, 1, 4194304}},
    {"R1024 C64", 4643936, 64, 64, l40, Stats::fits, {V::mma, 64, 128, true, 1, 4194304}},
    {"R1024 C64", 4643936, 64, 64, rtx50, Stats::fits, {V::mma, 64, 128, true, 1, 4194304}},
    {"R1024 C64", 4643936, 64, 64, h100_no90a, Stats::fits, {V::mma, 64, 128, true, 1, 4194304}},
    {"R1024 C128", 4643936, 128, 128, h200, Stats::fits, {V::halo_pipe, 128, 128, false, 1, 4643936}},
    {"R1024 C128", 4643936, 128, 128, h200, Stats::misfits, {V::wgmma_ws, 128, 256, false, 1, 4643936}},
    {"R1024 C128", 4643936, 128, 128, h200, Stats::user, {V::wgmma_ws, 128, 256, false, 1, 4643936}},
    {"R1024 C128", 4643936, 128, 128, a100, Stats::fits, {V::mma, 128, 128, true, 1, 4194304}},
    {"R1024 C128", 4643936, 128, 128, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 4194304}},
    {"R1024 C128", 4643936, 128, 128, l40, Stats::fits, {V::mma, 128, 128, true, 1, 4194304}},
    {"R1024 C128", 4643936, 128, 128, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 4194304}},
    {"R1024 C128", 4643936, 128, 128, h100_no90a, Stats::fits, {V::mma, 128, 128, true, 1, 4194304}},
    {"R1024 C256", 4643936, 256, 256, h200, Stats::fits, {V::wgmma_ws, 256, 128, true, 1, 4194304}},
    {"R1024 C256", 4643936, 256, 256, h200, Stats::misfits, {V::wgmma_ws, 256, 128, true, 1, 4194304}},
    {"R1024 C256", 4643936, 256, 256, h200, Stats::user, {V::wgmma_ws, 256, 128, true, 1, 4194304}},
    {"R1024 C256", 4643936, 256, 256, a100, Stats::fits, {V::mma, 128, 128, true, 1, 4194304}},
    {"R1024 C256", 4643936, 256, 256, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 4194304}},
    {"R1024 C256", 4643936, 256, 256, l40, Stats::fits, {V::mma, 128, 128, true, 1, 4194304}},
    {"R1024 C256", 4643936, 256, 256, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 4194304}},
    {"R1024 C256", 4643936, 256, 256, h100_no90a, Stats::fits, {V::mma, 256, 128, true, 1, 4194304}},
    {"R512 C64", 1159784, 64, 64, h200, Stats::fits, {V::halo_pipe, 64, 128, false, 1, 1159784}},
    {"R512 C64", 1159784, 64, 64, h200, Stats::misfits, {V::wgmma_ws2, 64, 128, false, 1, 1159784}},
    {"R512 C64", 1159784, 64, 64, h200, Stats::user, {V::wgmma_ws2, 64, 128, false, 1, 1159784}},
    {"R512 C64", 1159784, 64, 64, a100, Stats::fits, {V::mma, 64, 128, true, 1, 1159784}},
    {"R512 C64", 1159784, 64, 64, a6000, Stats::fits, {V::mma, 64, 128, true, 1, 1159784}},
    {"R512 C64", 1159784, 64, 64, l40, Stats::fits, {V::mma, 64, 128, true, 1, 1159784}},
    {"R512 C64", 1159784, 64, 64, rtx50, Stats::fits, {V::mma, 64, 128, true, 1, 1159784}},
    {"R512 C64", 1159784, 64, 64, h100_no90a, Stats::fits, {V::mma, 64, 128, true, 1, 1159784}},
    {"R512 C128", 1159784, 128, 128, h200, Stats::fits, {V::halo_pipe, 128, 128, false, 1, 1159784}},
    {"R512 C128", 1159784, 128, 128, h200, Stats::misfits, {V::wgmma_ws, 128, 256, false, 1, 1159784}},
    {"R512 C128", 1159784, 128, 128, h200, Stats::user, {V::wgmma_ws, 128, 256, false, 1, 1159784}},
    {"R512 C128", 1159784, 128, 128, a100, Stats::fits, {V::mma, 128, 128, true, 1, 1159784}},
    {"R512 C128", 1159784, 128, 128, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 1159784}},
    {"R512 C128", 1159784, 128, 128, l40, Stats::fits, {V::mma, 128, 128, true, 1, 1159784}},
    {"R512 C128", 1159784, 128, 128, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 1159784}},
    {"R512 C128", 1159784, 128, 128, h100_no90a, Stats::fits, {V::mma, 128, 128, true, 1, 1159784}},
    {"R512 C256", 1159784, 256, 256, h200, Stats::fits, {V::wgmma_ws, 256, 128, true, 1, 1159784}},
    {"R512 C256", 1159784, 256, 256, h200, Stats::misfits, {V::wgmma_ws, 256, 128, true, 1, 1159784}},
    {"R512 C256", 1159784, 256, 256, h200, Stats::user, {V::wgmma_ws, 256, 128, true, 1, 1159784}},
    {"R512 C256", 1159784, 256, 256, a100, Stats::fits, {V::mma, 128, 128, true, 1, 1159784}},
    {"R512 C256", 1159784, 256, 256, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 1159784}},
    {"R512 C256", 1159784, 256, 256, l40, Stats::fits, {V::mma, 128, 128, true, 1, 1159784}},
    {"R512 C256", 1159784, 256, 256, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 1159784}},
    {"R512 C256", 1159784, 256, 256, h100_no90a, Stats::fits, {V::mma, 256, 128, true, 1, 1159784}},
    {"R256 C64", 289772, 64, 64, h200, Stats::fits, {V::halo_pipe, 64, 128, false, 1, 289772}},
    {"R256 C64", 289772, 64, 64, h200, Stats::misfits, {V::wgmma_ws2, 64, 128, false, 1, 289772}},
    {"R256 C64", 289772, 64, 64, h200, Stats::user, {V::wgmma_ws2, 64, 128, false, 1, 289772}},
    {"R256 C64", 289772, 64, 64, a100, Stats::fits, {V::mma, 64, 128, true, 1, 289772}},
    {"R256 C64", 289772, 64, 64, a6000, Stats::fits, {V::mma, 64, 128, true, 1, 289772}},
    {"R256 C64", 289772, 64, 64, l40, Stats::fits, {V::mma, 64, 128, true, 1, 289772}},
    {"R256 C64", 289772, 64, 64, rtx50, Stats::fits, {V::mma, 64, 128, true, 1, 289772}},
    {"R256 C64", 289772, 64, 64, h100_no90a, Stats::fits, {V::mma, 64, 128, true, 1, 289772}},
    {"R256 C128", 289772, 128, 128, h200, Stats::fits, {V::halo_pipe, 128, 128, false, 1, 289772}},
    {"R256 C128", 289772, 128, 128, h200, Stats::misfits, {V::wgmma_ws, 128, 256, false, 1, 289772}},
    {"R256 C128", 289772, 128, 128, h200, Stats::user, {V::wgmma_ws, 128, 256, false, 1, 289772}},
    {"R256 C128", 289772, 128, 128, a100, Stats::fits, {V::mma, 128, 128, true, 1, 289772}},
    {"R256 C128", 289772, 128, 128, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 289772}},
    {"R256 C128", 289772, 128, 128, l40, Stats::fits, {V::mma, 128, 128, true, 1, 289772}},
    {"R256 C128", 289772, 128, 128, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 289772}},
    {"R256 C128", 289772, 128, 128, h100_no90a, Stats::fits, {V::mma, 128, 128, true, 1, 289772}},
    {"R256 C256", 289772, 256, 256, h200, Stats::fits, {V::wgmma_ws, 256, 128, true, 1, 289772}},
    {"R256 C256", 289772, 256, 256, h200, Stats::misfits, {V::wgmma_ws, 256, 128, true, 1, 289772}},
    {"R256 C256", 289772, 256, 256, h200, Stats::user, {V::wgmma_ws, 256, 128, true, 1, 289772}},
    {"R256 C256", 289772, 256, 256, a100, Stats::fits, {V::mma, 128, 128, true, 1, 289772}},
    {"R256 C256", 289772, 256, 256, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 289772}},
    {"R256 C256", 289772, 256, 256, l40, Stats::fits, {V::mma, 128, 128, true, 1, 289772}},
    {"R256 C256", 289772, 256, 256, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 289772}},
    {"R256 C256", 289772, 256, 256, h100_no90a, Stats::fits, {V::mma, 256, 128, true, 1, 289772}},
    {"T20 1024-1024", 1658, 1024, 1024, h200, Stats::fits, {V::wgmma_ws, 256, 128, false, 3, 1658}},
    {"T20 1024-1024", 1658, 1024, 1024, h200, Stats::misfits, {V::wgmma_ws, 256, 128, false, 3, 1658}},
    {"T20 1024-1024", 1658, 1024, 1024, h200, Stats::user, {V::wgmma_ws, 256, 128, false, 3, 1658}},
    {"T20 1024-1024", 1658, 1024, 1024, a100, Stats::fits, {V::mma, 128, 128, true, 1, 1658}},
    {"T20 1024-1024", 1658, 1024, 1024, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 1658}},
    {"T20 1024-1024", 1658, 1024, 1024, l40, Stats::fits, {V::mma, 128, 128, true, 1, 1658}},
    {"T20 1024-1024", 1658, 1024, 1024, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 1658}},
    {"T20 1024-1024", 1658, 1024, 1024, h100_no90a, Stats::fits, {V::mma, 128, 128, true, 1, 1658}},
    {"T20 1024-4096", 1658, 1024, 4096, h200, Stats::fits, {V::wgmma_ws, 256, 128, false, 1, 1658}},
    {"T20 1024-4096", 1658, 1024, 4096, h200, Stats::misfits, {V::wgmma_ws, 256, 128, false, 1, 1658}},
    {"T20 1024-4096", 1658, 1024, 4096, h200, Stats::user, {V::wgmma_ws, 256, 128, false, 1, 1658}},
    {"T20 1024-4096", 1658, 1024, 4096, a100, Stats::fits, {V::mma, 128, 128, true, 1, 1658}},
    {"T20 1024-4096", 1658, 1024, 4096, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 1658}},
    {"T20 1024-4096", 1658, 1024, 4096, l40, Stats::fits, {V::mma, 128, 128, true, 1, 1658}},
    {"T20 1024-4096", 1658, 1024, 4096, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 1658}},
    {"T20 1024-4096", 1658, 1024, 4096, h100_no90a, Stats::fits, {V::mma, 256, 128, true, 1, 1658}},
    {"T43 512-512", 8432, 512, 512, h200, Stats::fits, {V::wgmma_ws, 256, 128, false, 1, 8432}},
    {"T43 512-512", 8432, 512, 512, h200, Stats::misfits, {V::wgmma_ws, 256, 128, false, 1, 8432}},
    {"T43 512-512", 8432, 512, 512, h200, Stats::user, {V::wgmma_ws, 256, 128, false, 1, 8432}},
    {"T43 512-512", 8432, 512, 512, a100, Stats::fits, {V::mma, 128, 128, true, 1, 8432}},
    {"T43 512-512", 8432, 512, 512, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 8432}},
    {"T43 512-512", 8432, 512, 512, l40, Stats::fits, {V::mma, 128, 128, true, 1, 8432}},
    {"T43 512-512", 8432, 512, 512, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 8432}},
    {"T43 512-512", 8432, 512, 512, h100_no90a, Stats::fits, {V::mma, 256, 128, true, 1, 8432}},
    {"T43 512-2048", 8432, 512, 2048, h200, Stats::fits, {V::wgmma_ws, 256, 128, false, 1, 8432}},
    {"T43 512-2048", 8432, 512, 2048, h200, Stats::misfits, {V::wgmma_ws, 256, 128, false, 1, 8432}},
    {"T43 512-2048", 8432, 512, 2048, h200, Stats::user, {V::wgmma_ws, 256, 128, false, 1, 8432}},
    {"T43 512-2048", 8432, 512, 2048, a100, Stats::fits, {V::mma, 128, 128, true, 1, 8432}},
    {"T43 512-2048", 8432, 512, 2048, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 8432}},
    {"T43 512-2048", 8432, 512, 2048, l40, Stats::fits, {V::mma, 128, 128, true, 1, 8432}},
    {"T43 512-2048", 8432, 512, 2048, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 8432}},
    {"T43 512-2048", 8432, 512, 2048, h100_no90a, Stats::fits, {V::mma, 256, 128, true, 1, 8432}},
    {"T92 256-256", 37544, 256, 256, h200, Stats::fits, {V::wgmma_ws, 256, 128, false, 1, 37544}},
    {"T92 256-256", 37544, 256, 256, h200, Stats::misfits, {V::wgmma_ws, 256, 128, false, 1, 37544}},
    {"T92 256-256", 37544, 256, 256, h200, Stats::user, {V::wgmma_ws, 256, 128, false, 1, 37544}},
    {"T92 256-256", 37544, 256, 256, a100, Stats::fits, {V::mma, 128, 128, true, 1, 37544}},
    {"T92 256-256", 37544, 256, 256, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 37544}},
    {"T92 256-256", 37544, 256, 256, l40, Stats::fits, {V::mma, 128, 128, true, 1, 37544}},
    {"T92 256-256", 37544, 256, 256, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 37544}},
    {"T92 256-256", 37544, 256, 256, h100_no90a, Stats::fits, {V::mma, 256, 128, true, 1, 37544}},
    {"T92 256-1024", 37544, 256, 1024, h200, Stats::fits, {V::wgmma_ws, 256, 128, false, 1, 37544}},
    {"T92 256-1024", 37544, 256, 1024, h200, Stats::misfits, {V::wgmma_ws, 256, 128, false, 1, 37544}},
    {"T92 256-1024", 37544, 256, 1024, h200, Stats::user, {V::wgmma_ws, 256, 128, false, 1, 37544}},
    {"T92 256-1024", 37544, 256, 1024, a100, Stats::fits, {V::mma, 128, 128, true, 1, 37544}},
    {"T92 256-1024", 37544, 256, 1024, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 37544}},
    {"T92 256-1024", 37544, 256, 1024, l40, Stats::fits, {V::mma, 128, 128, true, 1, 37544}},
    {"T92 256-1024", 37544, 256, 1024, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 37544}},
    {"T92 256-1024", 37544, 256, 1024, h100_no90a, Stats::fits, {V::mma, 256, 128, true, 1, 37544}},
    {"T196 128-128", 168968, 128, 128, h200, Stats::fits, {V::halo_pipe, 128, 128, false, 1, 168968}},
    {"T196 128-128", 168968, 128, 128, h200, Stats::misfits, {V::wgmma_ws, 128, 256, false, 1, 168968}},
    {"T196 128-128", 168968, 128, 128, h200, Stats::user, {V::wgmma_ws, 128, 256, false, 1, 168968}},
    {"T196 128-128", 168968, 128, 128, a100, Stats::fits, {V::mma, 128, 128, true, 1, 168968}},
    {"T196 128-128", 168968, 128, 128, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 168968}},
    {"T196 128-128", 168968, 128, 128, l40, Stats::fits, {V::mma, 128, 128, true, 1, 168968}},
    {"T196 128-128", 168968, 128, 128, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 168968}},
    {"T196 128-128", 168968, 128, 128, h100_no90a, Stats::fits, {V::mma, 128, 128, true, 1, 168968}},
    {"T196 128-512", 168968, 128, 512, h200, Stats::fits, {V::wgmma_ws, 256, 128, true, 1, 168968}},
    {"T196 128-512", 168968, 128, 512, h200, Stats::misfits, {V::wgmma_ws, 256, 128, true, 1, 168968}},
    {"T196 128-512", 168968, 128, 512, h200, Stats::user, {V::wgmma_ws, 256, 128, true, 1, 168968}},
    {"T196 128-512", 168968, 128, 512, a100, Stats::fits, {V::mma, 128, 128, true, 1, 168968}},
    {"T196 128-512", 168968, 128, 512, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 168968}},
    {"T196 128-512", 168968, 128, 512, l40, Stats::fits, {V::mma, 128, 128, true, 1, 168968}},
    {"T196 128-512", 168968, 128, 512, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 168968}},
    {"T196 128-512", 168968, 128, 512, h100_no90a, Stats::fits, {V::mma, 256, 128, true, 1, 168968}},
    {"T426 64-64", 803204, 64, 64, h200, Stats::fits, {V::halo_pipe, 64, 128, false, 1, 803204}},
    {"T426 64-64", 803204, 64, 64, h200, Stats::misfits, {V::wgmma_ws2, 64, 128, false, 1, 803204}},
    {"T426 64-64", 803204, 64, 64, h200, Stats::user, {V::wgmma_ws2, 64, 128, false, 1, 803204}},
    {"T426 64-64", 803204, 64, 64, a100, Stats::fits, {V::mma, 64, 128, true, 1, 803204}},
    {"T426 64-64", 803204, 64, 64, a6000, Stats::fits, {V::mma, 64, 128, true, 1, 803204}},
    {"T426 64-64", 803204, 64, 64, l40, Stats::fits, {V::mma, 64, 128, true, 1, 803204}},
    {"T426 64-64", 803204, 64, 64, rtx50, Stats::fits, {V::mma, 64, 128, true, 1, 803204}},
    {"T426 64-64", 803204, 64, 64, h100_no90a, Stats::fits, {V::mma, 64, 128, true, 1, 803204}},
    {"R512 64-128", 1159784, 64, 128, h200, Stats::fits, {V::halo_pipe, 128, 128, false, 1, 1159784}},
    {"R512 64-128", 1159784, 64, 128, h200, Stats::misfits, {V::wgmma_ws, 128, 256, false, 1, 1159784}},
    {"R512 64-128", 1159784, 64, 128, h200, Stats::user, {V::wgmma_ws, 128, 256, false, 1, 1159784}},
    {"R512 64-128", 1159784, 64, 128, a100, Stats::fits, {V::mma, 128, 128, true, 1, 1159784}},
    {"R512 64-128", 1159784, 64, 128, a6000, Stats::fits, {V::mma, 128, 128, true, 1, 1159784}},
    {"R512 64-128", 1159784, 64, 128, l40, Stats::fits, {V::mma, 128, 128, true, 1, 1159784}},
    {"R512 64-128", 1159784, 64, 128, rtx50, Stats::fits, {V::mma, 128, 128, true, 1, 1159784}},
    {"R512 64-128", 1159784, 64, 128, h100_no90a, Stats::fits, {V::mma, 128, 128, true, 1, 1159784}},
    {"R512 128-64", 1159784, 128, 64, h200, Stats::fits, {V::halo_pipe, 64, 128, false, 1, 1159784}},
    {"R512 128-64", 1159784, 128, 64, h200, Stats::misfits, {V::wgmma, 64, 128, false, 1, 1159784}},
    {"R512 128-64", 1159784, 128, 64, h200, Stats::user, {V::wgmma, 64, 128, false, 1, 1159784}},
    {"R512 128-64", 1159784, 128, 64, a100, Stats::fits, {V::mma, 64, 128, true, 1, 1159784}},
    {"R512 128-64", 1159784, 128, 64, a6000, Stats::fits, {V::mma, 64, 128, true, 1, 1159784}},
    {"R512 128-64", 1159784, 128, 64, l40, Stats::fits, {V::mma, 64, 128, true, 1, 1159784}},
    {"R512 128-64", 1159784, 128, 64, rtx50, Stats::fits, {V::mma, 64, 128, true, 1, 1159784}},
    {"R512 128-64", 1159784, 128, 64, h100_no90a, Stats::fits, {V::mma, 64, 128, true, 1, 1159784}},
};

TEST(ChooseSpconv, TableOfShapesAndDevices) {
  for (const Row& r : kTable) {
    SCOPED_TRACE(std::string(r.shape) + " on " + to_string(r.caps) + " stats " +
                 std::to_string(static_cast<int>(r.stats)));
    const backend::ConvArgs a = args(r.n, r.ci, r.co);
    const ConvChoice got = pick(a, r.caps, r.stats);
    EXPECT_EQ(to_string(got), to_string(r.want));
    EXPECT_TRUE(can_implement(a, r.caps, got));
    EXPECT_EQ(complete(a, r.caps, got), got) << "a complete choice completes to itself";
  }
}

TEST(ChooseSpconv, NeverAnSm90aVariantWithoutSm90aCode) {
  for (const Row& r : kTable)
    for (const DeviceCaps& caps : {a100, a6000, l40, rtx50, b200, h100_no90a}) {
      const ConvChoice c = pick(args(r.n, r.ci, r.co), caps, Stats::fits);
      EXPECT_NE(arch_of(c.variant), Arch::sm90a) << r.shape << " on " << to_string(caps) << ": " << to_string(c);
      EXPECT_TRUE(runs_on(arch_of(c.variant), caps)) << to_string(c);
    }
}

// What each variant's code needs, as the kernels are written: the wgmma family is sm_90a code.
TEST(ChooseSpconv, EachVariantStatesTheArchitecturesItRunsOn) {
  const std::pair<V, Arch> table[] = {
      {V::cpu, Arch::cpu},     {V::simt, Arch::simt},      {V::wmma, Arch::sm80},       {V::mma, Arch::sm80},
      {V::wgmma, Arch::sm90a}, {V::wgmma_ws, Arch::sm90a}, {V::wgmma_ws2, Arch::sm90a}, {V::halo_pipe, Arch::sm90a}};
  for (auto [v, arch] : table) EXPECT_EQ(arch_of(v), arch) << to_string(v);
  for (auto [v, arch] : table) EXPECT_EQ(is_wgmma(v), arch == Arch::sm90a) << to_string(v);
  // Where each class runs: sm_90a code on 9.0 with it built only, the sm_80 class from 8.0 on.
  EXPECT_TRUE(runs_on(Arch::sm90a, h200));
  for (const DeviceCaps& caps : {a100, a6000, l40, rtx50, b200, h100_no90a}) {
    EXPECT_FALSE(runs_on(Arch::sm90a, caps)) << to_string(caps);
    EXPECT_TRUE(runs_on(Arch::sm80, caps)) << to_string(caps);
  }
  EXPECT_FALSE(runs_on(Arch::sm80, DeviceCaps::gpu(7, 5, 40)));
  EXPECT_TRUE(runs_on(Arch::simt, DeviceCaps::gpu(7, 5, 40)));
  EXPECT_FALSE(runs_on(Arch::simt, cpu));
  EXPECT_FALSE(runs_on(Arch::cpu, h200));
}

// The 256-wide mma tile holds 220 KB of shared memory: the 227 KB of 9.0 and 10.x, not the 163 KB of
// 8.0 or the 99 KB of 8.6, 8.9 and 12.0, which take 128-wide tiles instead.
TEST(ChooseSpconv, MmaTilesFitTheSharedMemoryOfTheDevice) {
  const backend::ConvArgs a = args(4643936, 256, 256);
  for (const DeviceCaps& caps : {a100, a6000, l40, rtx50}) {
    EXPECT_EQ(pick(a, caps, Stats::user).tile_co, 128) << to_string(caps);
    std::string why;
    EXPECT_FALSE(can_implement(a, caps, complete(a, caps, ConvChoice{.variant = V::mma, .tile_co = 256}), &why));
    EXPECT_NE(why.find("bytes of shared memory"), std::string::npos) << why;
  }
  for (const DeviceCaps& caps : {b200, h100_no90a})
    EXPECT_EQ(pick(a, caps, Stats::user).tile_co, 256) << to_string(caps);
  for (int tile_co : {64, 128})
    for (const DeviceCaps& caps : {a100, a6000, l40, rtx50, b200})
      EXPECT_LE(mma_smem_bytes(tile_co), static_cast<size_t>(caps.smem_per_block))
          << tile_co << " on " << to_string(caps);
}

TEST(ChooseSpconv, DtypesAndShapesOutsideTheMaskedKernels) {
  // f32: CUDA cores on every GPU; the CPU: its own loop.
  EXPECT_EQ(pick(args(289772, 64, 64, DType::f32), h200, Stats::fits).variant, V::simt);
  EXPECT_EQ(pick(args(289772, 64, 64, DType::f32), a100, Stats::fits).variant, V::simt);
  EXPECT_EQ(to_string(pick(args(1000, 64, 64), cpu, Stats::fits)),
            "cpu(tile_co 64, tile_rows 16, map order, splits 1, chunk_rows 1000)");
  // f16/bf16 the masked kernels cannot take: WMMA (K > 32, channels not multiples of 8, misaligned).
  EXPECT_EQ(to_string(pick(args(289772, 64, 64, DType::bf16, 125), h200, Stats::fits)),
            "wmma(tile_co 64, tile_rows 128, map order, splits 1, chunk_rows 289772)");
  EXPECT_EQ(pick(args(289772, 17, 64), h200, Stats::fits).variant, V::wmma);
  EXPECT_EQ(pick(args(289772, 64, 100), a100, Stats::fits).tile_co, 128);
  backend::ConvArgs odd = args(289772, 64, 64);
  odd.out = reinterpret_cast<void*>(uintptr_t{8});
  EXPECT_EQ(pick(odd, h200, Stats::fits).variant, V::wmma);
  // Before sm_80 (no bf16 tensor cores, no cp.async): CUDA cores for every dtype.
  EXPECT_EQ(pick(args(289772, 64, 64), DeviceCaps::gpu(7, 5, 40), Stats::fits).variant, V::simt);
  // More offsets than any kernel's tables hold (a user map of K > 343): none runs on the GPU.
  expect_error([&] { pick(args(1000, 8, 8, DType::f32, 400), h200, Stats::user); }, ErrorCode::unsupported,
               {"[spconv::submanifold_conv]", "no kernel runs this conv", "K = 400"});
}

TEST(ChooseSpconv, HaloKernelOnlyWhereTheMapSaysItsRowsFit) {
  const backend::ConvArgs a = args(1159784, 64, 64);
  EXPECT_EQ(pick(a, h200, Stats::fits).variant, V::halo_pipe);
  EXPECT_EQ(pick(a, h200, Stats::misfits).variant, V::wgmma_ws2);
  EXPECT_EQ(pick(a, h200, Stats::user).variant, V::wgmma_ws2);
  // Exactly 3/4 of the samples: enough; one fewer: not.
  MapStats m = stats_for(a.n, Stats::misfits);
  ASSERT_EQ(m.halo_samples, 256);
  m.halo_fits[0][0] = 192;
  EXPECT_EQ(choose(a, h200, &m).variant, V::halo_pipe);
  m.halo_fits[0][0] = 191;
  EXPECT_EQ(choose(a, h200, &m).variant, V::wgmma_ws2);
  // The fit of the configuration the shape runs: 128-wide tiles, two passes at Ci = Co = 128.
  const backend::ConvArgs b = args(1159784, 128, 128);
  m = stats_for(b.n, Stats::misfits);
  m.halo_fits[1][1] = 256;
  EXPECT_EQ(choose(b, h200, &m).variant, V::halo_pipe);
  m.halo_fits[1][1] = 0;
  m.halo_fits[1][0] = m.halo_fits[0][1] = 256;
  EXPECT_EQ(choose(b, h200, &m).variant, V::wgmma_ws);
  // Statistics of another map (other N or K) do not count; nor does a map that was not measured.
  m = stats_for(a.n + 1, Stats::fits);
  EXPECT_EQ(choose(a, h200, &m).variant, V::wgmma_ws2);
  m = stats_for(a.n, Stats::fits);
  m.halo_samples = 0;
  EXPECT_EQ(choose(a, h200, &m).variant, V::wgmma_ws2);
  // Fewer than two tiles a multiprocessor: not the halo kernel, whatever the map.
  EXPECT_EQ(pick(args((2 * 132 - 1) * 128, 64, 64), h200, Stats::fits).variant, V::wgmma);
  EXPECT_EQ(pick(args(2 * 132 * 128, 64, 64), h200, Stats::fits).variant, V::halo_pipe);
  // Shapes it does not serve: Co above the column tile, Ci > 128, K > 27 at one pass of 64 channels.
  EXPECT_EQ(pick(args(1159784, 256, 128), h200, Stats::fits).variant, V::wgmma);
  EXPECT_NE(pick(args(1159784, 64, 64, DType::f16, 32), h200, Stats::fits).variant, V::halo_pipe);
  EXPECT_EQ(pick(args(1159784, 128, 64, DType::f16, 32), h200, Stats::fits).variant, V::halo_pipe);
}

TEST(ChooseSpconv, ForcedChoicesAreCompletedByTheRulesOfTheirVariant) {
  const backend::ConvArgs a = args(1159784, 64, 64);
  // The tiling the rules give each variant where it is forced.
  EXPECT_EQ(to_string(complete(a, h200, ConvChoice{.variant = V::wgmma})),
            "wgmma(tile_co 64, tile_rows 256, map order, splits 1, chunk_rows 1159784)");
  EXPECT_EQ(to_string(complete(a, h200, ConvChoice{.variant = V::wgmma_ws})),
            "wgmma_ws(tile_co 64, tile_rows 128, map order, splits 1, chunk_rows 1159784)");
  EXPECT_EQ(to_string(complete(a, h200, ConvChoice{.variant = V::mma})),
            "mma(tile_co 64, tile_rows 128, sorted, splits 1, chunk_rows 1159784)");
  EXPECT_EQ(to_string(complete(a, h200, ConvChoice{.variant = V::wmma})),
            "wmma(tile_co 64, tile_rows 128, map order, splits 1, chunk_rows 1159784)");
  EXPECT_EQ(to_string(complete(a, h200, ConvChoice{.variant = V::simt})),
            "simt(tile_co 64, tile_rows 64, map order, splits 1, chunk_rows 1159784)");
  // Set fields stay; a small grid splits by rule (the halo kernel never does).
  const backend::ConvArgs small = args(1200, 64, 64);
  EXPECT_EQ(to_string(complete(small, h200, ConvChoice{.variant = V::wgmma, .tile_co = 128, .sort_rows = true})),
            "wgmma(tile_co 128, tile_rows 128, sorted, splits 8, chunk_rows 1200)");
  EXPECT_EQ(complete(small, h200, ConvChoice{.variant = V::halo_pipe}).splits, 1);
  EXPECT_EQ(complete(small, h200, ConvChoice{.variant = V::wgmma, .splits = 99}).splits, 27);
  EXPECT_EQ(complete(small, h200, ConvChoice{.variant = V::wgmma, .chunk_rows = 4096}).chunk_rows, 1200);
  // Workspace: the row order (16-byte rounded), the partials, the hand-off list.
  const ConvChoice sorted = complete(small, h200, ConvChoice{.variant = V::mma});
  EXPECT_EQ(workspace_bytes(small, sorted), 4800u);
  const ConvChoice split = complete(small, h200, ConvChoice{.variant = V::wgmma, .sort_rows = false, .splits = 3});
  EXPECT_EQ(workspace_bytes(small, split), 3u * 1200 * 64 * 4);
  EXPECT_EQ(workspace_bytes(small, complete(small, h200, ConvChoice{.variant = V::halo_pipe})), 16u + 48);
}

// The refusal of a forced choice, as the core words it: the variant and why.
void expect_refused(const backend::ConvArgs& a, const DeviceCaps& caps, ConvChoice forced,
                    std::initializer_list<std::string> why) {
  const ConvChoice c = complete(a, caps, forced);
  std::string reason;
  EXPECT_FALSE(can_implement(a, caps, c, &reason)) << to_string(c);
  for (const std::string& w : why) EXPECT_NE(reason.find(w), std::string::npos) << reason;
}

TEST(ChooseSpconv, ForcedChoicesRefusedWhereTheyCannotRun) {
  const backend::ConvArgs a = args(289772, 64, 64);
  for (V v : {V::cpu, V::simt, V::wmma, V::mma, V::wgmma, V::wgmma_ws, V::wgmma_ws2, V::halo_pipe}) {
    if (arch_of(v) != Arch::sm90a) continue;
    for (const DeviceCaps& caps : {a100, a6000, l40, rtx50, b200, h100_no90a})
      expect_refused(a, caps, ConvChoice{.variant = v}, {"sm_90a", to_string(caps)});
  }
  expect_refused(a, h200, ConvChoice{.variant = V::cpu}, {"CPU calls only"});
  expect_refused(a, cpu, ConvChoice{.variant = V::simt}, {"needs a CUDA device"});
  expect_refused(args(1000, 8, 8, DType::f16, 125), h200, ConvChoice{.variant = V::mma}, {"K <= 32", "K = 125"});
  expect_refused(args(1000, 8, 8, DType::f32), h200, ConvChoice{.variant = V::mma}, {"f16 or bf16", "f32"});
  expect_refused(args(1000, 8, 8, DType::f32), h200, ConvChoice{.variant = V::wmma}, {"f16 or bf16"});
  expect_refused(a, DeviceCaps::gpu(7, 5, 40), ConvChoice{.variant = V::wmma}, {"8.0 or newer"});
  // Tilings a variant does not have.
  expect_refused(a, h200, ConvChoice{.variant = V::wmma, .tile_co = 256}, {"tile_co 64 or 128"});
  expect_refused(a, h200, ConvChoice{.variant = V::simt, .tile_co = 128}, {"64 × 64"});
  expect_refused(a, h200, ConvChoice{.variant = V::mma, .tile_co = 96}, {"tile_co 64, 128 or 256"});
  expect_refused(a, h200, ConvChoice{.variant = V::mma, .tile_rows = 256}, {"128-row tiles"});
  expect_refused(a, h200, ConvChoice{.variant = V::mma, .splits = 2}, {"unsplit"});
  expect_refused(a, h200, ConvChoice{.variant = V::wgmma, .tile_co = 256, .tile_rows = 256}, {"tile_co <= 128"});
  expect_refused(a, h200, ConvChoice{.variant = V::wgmma_ws2, .tile_co = 128}, {"64-wide"});
  expect_refused(a, h200, ConvChoice{.variant = V::wgmma_ws2, .tile_rows = 256}, {"64-wide"});
  expect_refused(a, h200, ConvChoice{.variant = V::wgmma, .chunk_rows = 1000}, {"chunk_rows a multiple of 128"});
  expect_refused(a, h200, ConvChoice{.variant = V::halo_pipe, .splits = 2}, {"unsplit"});
  expect_refused(args(289772, 64, 128), h200, ConvChoice{.variant = V::halo_pipe, .tile_co = 64}, {"all of Co"});
  expect_refused(args(289772, 256, 128), h200, ConvChoice{.variant = V::halo_pipe}, {"Ci = 256"});
  expect_refused(args(289772, 64, 64, DType::f16, 32), h200, ConvChoice{.variant = V::halo_pipe}, {"K <= 27"});
  expect_refused(args(1000, 8, 8, DType::f16, 400), h200, ConvChoice{.variant = V::wmma}, {"K <= 343"});
}

TEST(ChooseSpconv, NamesOfTheVariants) {
  const char* names[] = {"cpu", "simt", "wmma", "mma", "wgmma", "wgmma_ws", "wgmma_ws2", "halo_pipe"};
  for (int v = 0; v <= static_cast<int>(V::halo_pipe); ++v) EXPECT_EQ(to_string(static_cast<V>(v)), names[v]);
}

}  // namespace
}  // namespace frugal::spconv
