"""The scale benchmark's job: each rank says who it is. Needs no torch (setup ran without a
Python environment); rank mode hands it RANK and WORLD_SIZE from Open MPI."""
import os
import socket

print(f"TINY_RANK rank={os.environ['RANK']} world_size={os.environ['WORLD_SIZE']} host={socket.gethostname()}",
      flush=True)
