// `loom cluster`: the training set split into clusters for decentralized experts.
#include "commands.h"
#include "loom/train/checkpoint_dir.h"
#include "loom/train/recipes/dit_clusters.h"
#include "numbers.h"

namespace loom::cli {

namespace {

void add_cluster(CLI::App& cmd, train::ClusterOptions& o) {
  cmd.description(
      "split the Fashion-MNIST training set into K clusters (k-means on the classifier's "
      "features) for decentralized experts: each trains on one (data.clusters, data.cluster); "
      "writes the assignments and OUT_centroids.npy");
  add_int(cmd, "--k", o.k, "clusters", 1);
  cmd.add_option("--out", o.out, "the assignments, an .npy file")->required()->type_name("FILE");
  cmd.add_option("--classifier", o.classifier, "the classifier's run directory")->type_name("DIR");
  cmd.add_option("--data", o.data_path, "the Fashion-MNIST directory")->type_name("DIR");
  add_int(cmd, "--images", o.images, "only the first N training images (0: all)", 0);
  add_int(cmd, "--seed", o.seed, "k-means seed", 0);
}

}  // namespace

void add_cluster_command(CLI::App& loom, int& code) {
  auto o = std::make_shared<train::ClusterOptions>();
  CLI::App* cmd = loom.add_subcommand("cluster");
  add_cluster(*cmd, *o);
  cmd->callback([o, &code] {
    train::check_output_path(o->out, "cluster --out");
    train::cluster_training_set(*o);
    code = 0;
  });
}

}  // namespace loom::cli
