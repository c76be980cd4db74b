// The `waste` subcommands. Each returns the process exit status and throws cli::UsageFailure
// for a bad command line; engine errors propagate to main, which prints them.
#pragma once

namespace waste::cli {

int cmd_info(int argc, char** argv);
int cmd_verify(int argc, char** argv);
int cmd_verify_deep(int argc, char** argv);  // `verify --deep`, called by cmd_verify
int cmd_synth(int argc, char** argv);
int cmd_convert(int argc, char** argv);
int cmd_download(int argc, char** argv);
int cmd_run(int argc, char** argv);
int cmd_eval(int argc, char** argv);
int cmd_plan(int argc, char** argv);
int cmd_cachesim(int argc, char** argv);
int cmd_bench(int argc, char** argv);
int cmd_bench_kernels(int argc, char** argv);  // `bench --kernels`, called by cmd_bench
int cmd_serve(int argc, char** argv);
int cmd_health(int argc, char** argv);
int cmd_chat(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);
int cmd_render(int argc, char** argv);
int cmd_schema(int argc, char** argv);
int cmd_cache(int argc, char** argv);

}  // namespace waste::cli
