/**
 * V8's helper threads (concurrent marking, parallel scavenges, background compiles) run at the
 * lowest priority, below the sidecar's main thread (decision 3092). A sidecar is given about one
 * core; at equal priority the kernel gives a helper thread whole time slices while the main
 * thread has Checks to answer, and the event loop stalls for them — the largest cause of the
 * stalls over 5 ms at 500 Checks/s ("waiting for a core: own threads"). Reniced, the helpers run
 * while the main thread waits for I/O, and when the main thread needs their work finished it
 * takes part in it (V8's jobs let the joining thread run the remaining work itself).
 *
 * Linux only: there a thread's id given to setpriority(2) changes that thread alone. Elsewhere,
 * or where /proc cannot be read or a seccomp profile refuses the call, nothing changes.
 */
import { readdirSync, readFileSync } from "node:fs";
import { setPriority } from "node:os";

/** The niceness given to V8's helper threads: the lowest priority a process may set itself. */
export const HELPER_THREAD_NICENESS = 19;
/** The name Node gives V8's platform worker threads (`/proc/self/task/<tid>/comm`). */
const V8_HELPER_THREAD_NAME = "V8Worker";

/** Lowers the priority of this process's V8 helper threads; returns how many were lowered. */
export function lowerHelperThreadPriority(): number {
  if (process.platform !== "linux") return 0;
  let tasks: string[];
  try {
    tasks = readdirSync("/proc/self/task");
  } catch {
    return 0;
  }
  let lowered = 0;
  for (const task of tasks) {
    try {
      if (readFileSync(`/proc/self/task/${task}/comm`, "utf8").trim() !== V8_HELPER_THREAD_NAME) continue;
      setPriority(Number(task), HELPER_THREAD_NICENESS);
      lowered++;
    } catch {
      // The thread ended meanwhile, or the call was refused: it keeps its priority.
    }
  }
  return lowered;
}
