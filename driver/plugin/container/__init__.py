"""What a claim's containers get from the host: driver files, device nodes, limiter, CDI edits."""
