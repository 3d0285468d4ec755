#include <cstdio>
int main() { std::puts("x"); }
