// Builds the precompiled header (torch/torch.h, gtest) that every torch test target reuses.
