/* Binding the OpenMP team of the calling thread to one core per thread, as vLLM's CPU worker binds its own.
 *
 * Unbound, the team's threads float: when another process takes a core for a while (the gateway, Triton, a browser
 * on a laptop), the OS may run two of them on the other core, where a thread spinning at a barrier burns the time
 * slices of the thread it waits for. Measured on the 2-core Zen 4 with other work taking a core now and then: a
 * 2-thread bf16 decode step of 29-32 ms took 698 and 1,200 ms unbound, 83 and 88 ms bound (equal when the machine
 * was quieter: 29.4 vs 29.6 ms).
 */
#define _GNU_SOURCE
#include <omp.h>
#include <pthread.h>
#include <sched.h>

/* Binds thread t of a team of n (the caller is thread 0) to cores[t]; returns how many threads were bound. */
int bind_team(const int *cores, int n) {
    int bound = 0;
    if (n < 1) return 0;
#pragma omp parallel num_threads(n) reduction(+ : bound)
    {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cores[omp_get_thread_num()], &set);
        bound += pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
    }
    return bound;
}
