/*
 * The OpenMP-tasks peer of `pto bench metg` (BENCHMARKS.md B2): Task Bench's stencil_1d on a
 * grid of 2 x width cells, as `#pragma omp task depend` tasks created by one thread of a team
 * of `threads`. Task (t, j) reads cells j-1..j+1 of the row step t-1 wrote and writes cell j of
 * its own row; its body is `kernel(grain_ns)`, the Rust function the pto and rayon rows of the
 * same run compute with (`pto_bench::spin`), called through a pointer.
 *
 * With `taskwait_every` > 0 the creating thread waits for all its tasks after every that many
 * steps. libgomp runs a new task at once on the creating thread, after waiting for its
 * dependencies, whenever more than 64 x team size tasks are queued; a whole graph of thousands of
 * tasks runs mostly that way. Waiting every 8 steps (16 x 8 = 128 tasks for a team of 2) keeps
 * the queue under that limit.
 */
#include <omp.h>
#include <stdint.h>
#include <time.h>

enum { MAX_WIDTH = 256 };

static double wall_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/*
 * Runs `steps` steps and returns the wall time in seconds; -1 when `width` is out of range (or
 * `threads` is not positive, or `kernel` is null: the Rust caller passes neither), -2 when
 * OpenMP gave the team fewer than `threads` threads (the figure would not compare).
 */
double pto_omp_stencil_1d(uint32_t steps, uint32_t width, uint64_t grain_ns, int32_t threads,
                          uint32_t taskwait_every, void (*kernel)(uint64_t))
{
    /* Only the addresses matter: they name the cells in the depend clauses. */
    char grid[2][MAX_WIDTH];
    int32_t team = 0;
    double started;
    double ended;
    if (width == 0 || width > MAX_WIDTH || threads < 1 || kernel == 0) {
        return -1.0;
    }
    started = wall_seconds();
#pragma omp parallel num_threads(threads) shared(team, grid)
#pragma omp single
    {
        team = omp_get_num_threads();
        for (uint32_t t = 0; t < steps; t++) {
            uint32_t row = t % 2;
            uint32_t prev = 1 - row;
            for (uint32_t j = 0; j < width; j++) {
                uint32_t lo = j > 0 ? j - 1 : j;
                uint32_t hi = j + 1 < width ? j + 1 : j;
#pragma omp task firstprivate(grain_ns, kernel) \
    depend(in : grid[prev][lo], grid[prev][j], grid[prev][hi]) depend(out : grid[row][j])
                kernel(grain_ns);
            }
            if (taskwait_every > 0 && (t + 1) % taskwait_every == 0) {
#pragma omp taskwait
            }
        }
#pragma omp taskwait
    }
    ended = wall_seconds();
    return team == threads ? ended - started : -2.0;
}
