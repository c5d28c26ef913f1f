// `ferry`: the command-line front door. It only dispatches: `ferry info`
// runs ferry-info, `ferry bench transport` runs ferry-bench-transport (the
// longest `ferry-a-b-...` program that exists wins), looking first beside
// this executable, then on PATH. Keeping the front door this thin means the
// installed `ferry` pulls in no test or benchmark dependencies.
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> SearchDirs() {
  std::vector<fs::path> dirs;
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) dirs.push_back(self.parent_path());
  if (const char* path = std::getenv("PATH")) {
    std::istringstream in(path);
    std::string dir;
    while (std::getline(in, dir, ':')) {
      if (!dir.empty()) dirs.emplace_back(dir);
    }
  }
  return dirs;
}

fs::path FindProgram(const std::string& name) {
  for (const fs::path& dir : SearchDirs()) {
    fs::path candidate = dir / name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

std::set<std::string> AvailableCommands() {
  std::set<std::string> out;
  for (const fs::path& dir : SearchDirs()) {
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      std::string file = entry.path().filename().string();
      if (file.rfind("ferry-", 0) == 0 && access(entry.path().c_str(), X_OK) == 0) {
        std::string cmd = file.substr(6);
        for (char& c : cmd)
          if (c == '-') c = ' ';
        out.insert(cmd);
      }
    }
  }
  return out;
}

int Usage(FILE* out) {
  std::fprintf(out,
               "usage: ferry <command> [args...]\n\n"
               "Commands found beside this program and on PATH:\n");
  for (const std::string& cmd : AvailableCommands())
    std::fprintf(out, "  ferry %s\n", cmd.c_str());
  std::fprintf(out,
               "\nEach runs the program ferry-<command> (words joined by '-'); "
               "`ferry <command> --help` shows its options.\n");
  return out == stdout ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return Usage(stderr);
  if (std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0 ||
      std::strcmp(argv[1], "help") == 0) {
    return Usage(stdout);
  }
  // Longest match first: "bench transport" -> ferry-bench-transport, then
  // ferry-bench. Only words that look like sub-command names are joined.
  int words = 0;
  while (1 + words < argc && argv[1 + words][0] != '-') ++words;
  for (int n = words; n >= 1; --n) {
    std::string name = "ferry";
    for (int i = 1; i <= n; ++i) name += std::string("-") + argv[i];
    fs::path program = FindProgram(name);
    if (program.empty()) continue;
    std::vector<char*> args;
    std::string arg0 = program.string();
    args.push_back(arg0.data());
    for (int i = 1 + n; i < argc; ++i) args.push_back(argv[i]);
    args.push_back(nullptr);
    execv(program.c_str(), args.data());
    std::fprintf(stderr, "ferry: cannot run %s: %s\n", program.c_str(),
                 std::strerror(errno));
    return 127;
  }
  std::fprintf(stderr,
               "ferry: '%s' is not a ferry command (no program ferry-%s beside ferry or "
               "on PATH).\n\n",
               argv[1], argv[1]);
  return Usage(stderr);
}
