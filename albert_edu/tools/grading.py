"""How `albert-edu classroom autograde` runs a submission's code: nbgrader's Execute preprocessor with guards.

nbgrader itself interrupts a cell that runs past its time limit (SIGINT). A cell can catch the KeyboardInterrupt
(a bare `except:` does) and run on; then every later cell waits for a kernel that never answers. GuardedExecute,
configured in place of nbgrader's Execute, waits `interrupt_grace_s` for the interrupted cell to stop; if it has
not, it kills the kernel with its whole process group (SIGKILL) and runs the rest of the notebook in a fresh
kernel, so that the cells that ran are graded and the grading ends. It also caps the kernel's address space
(`memory_limit_mb`, with RLIMIT_AS: an allocation past it raises MemoryError in the cell), and when the notebook is
done it kills whatever the kernel's process group still holds (a child process that outlived its cell).

Not guarded: a process that leaves the kernel's process group (setsid), and, for a submission running as the same
user as the grader, files it reaches by absolute path (classroom.autograde grades each submission in a temporary
copy of the course, so paths relative to the notebook reach only that copy).
"""

import os
import resource
import signal
from queue import Empty

from nbclient.util import ensure_async
from nbgrader.preprocessors import Execute
from traitlets import Bool, Float, Integer

KILLED = "CellTimeoutError"  # the name nbgrader gives a timed-out cell's error, kept so that reports read one name


class GuardedExecute(Execute):
    interrupt_grace_s = Float(5.0, help="seconds a timed-out cell has to stop after SIGINT before its kernel is "
                                         "killed").tag(config=True)
    memory_limit_mb = Integer(0, help="the kernel's address-space limit in MiB (RLIMIT_AS); 0: none").tag(config=True)
    # after a kill no output of the killed cell will come: wait for it only as long as iopub_timeout, then go on
    raise_on_iopub_timeout = Bool(False)

    async def async_start_new_kernel(self, **kwargs):
        await super().async_start_new_kernel(**kwargs)
        self._limit_memory()

    def _limit_memory(self) -> None:
        if self.memory_limit_mb > 0:
            limit = self.memory_limit_mb * 2**20
            resource.prlimit(self.km.provisioner.pid, resource.RLIMIT_AS, (limit, limit))

    async def _async_poll_for_reply(self, msg_id, cell, timeout, task_poll_output_msg, task_poll_kernel_alive):
        self._waiting_for = msg_id  # what _async_handle_timeout waits for after its interrupt
        return await super()._async_poll_for_reply(msg_id, cell, timeout, task_poll_output_msg,
                                                   task_poll_kernel_alive)

    async def _async_handle_timeout(self, timeout, cell=None):
        await ensure_async(self.km.interrupt_kernel())
        try:
            while True:  # the interrupted cell's reply, if it stops in time
                reply = await ensure_async(self.kc.shell_channel.get_msg(timeout=self.interrupt_grace_s))
                if reply["parent_header"].get("msg_id") == self._waiting_for:
                    return {"content": {**self.error_on_timeout, "status": "error"}}
        except Empty:
            pass
        self.log.error("The cell ignored the interrupt: killing its kernel and going on in a fresh one")
        folder = self.resources.get("metadata", {}).get("path")
        if folder:  # the fresh kernel starts in the notebook's folder, which the cell may have deleted
            os.makedirs(folder, exist_ok=True)
        await ensure_async(self.km.restart_kernel(now=True))  # SIGKILL to the kernel's process group
        self._limit_memory()
        message = (f"the cell ran past its limit of {timeout} s and went on after an interrupt, so its kernel was "
                   f"killed; the cells after it ran in a fresh kernel")
        return {"content": {"ename": KILLED, "evalue": message, "status": "error",
                            "traceback": [f"\x1b[0;31m{KILLED}\x1b[0m: {message}"]}}

    async def _async_cleanup_kernel(self):
        group = self.km.provisioner.pgid if self.km is not None and self.km.provisioner is not None else None
        try:
            await super()._async_cleanup_kernel()
        finally:
            if group:
                try:
                    os.killpg(group, signal.SIGKILL)  # what the kernel started and left running
                except (ProcessLookupError, PermissionError):
                    pass
