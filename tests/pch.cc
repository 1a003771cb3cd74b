// Builds the precompiled header (gtest and the standard library) that every test program
// at the tests' flags reuses (tests/CMakeLists.txt, tdist_add_test).
