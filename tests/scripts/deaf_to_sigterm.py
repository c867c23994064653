"""Ignores SIGTERM and sleeps, as a process stuck in a collective can be deaf to it: only SIGKILL ends it.
Prints its pid, so a test can check that nothing of the job outlives the launcher."""

import os
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(f"ready {os.getpid()}", flush=True)
time.sleep(3600)
