"""An agent's GPUs: found through NVML or declared hollow, sampled for each heartbeat."""
