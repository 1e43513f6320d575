# The emulator's own tests (filled in below).
