/* A real PMI-2 client (Slurm's libpmi2): put, fence, get every peer's key,
 * read the process mapping, and finalize. Not linked with MPICH. */
#include <slurm/pmi2.h>
#include <stdio.h>
#include <string.h>
int main(void) {
  int spawned, size, rank, appnum, i, len, found;
  char jobid[256], key[64], val[1024], want[64];
  if (PMI2_Init(&spawned, &size, &rank, &appnum) != PMI2_SUCCESS) { printf("init failed\n"); return 1; }
  if (PMI2_Job_GetId(jobid, sizeof jobid) != PMI2_SUCCESS) { printf("getid failed\n"); return 1; }
  snprintf(key, sizeof key, "addr-%d", rank);
  snprintf(val, sizeof val, "value;with;semicolons-%d", rank);
  if (PMI2_KVS_Put(key, val) != PMI2_SUCCESS || PMI2_KVS_Fence() != PMI2_SUCCESS) { printf("put/fence failed\n"); return 1; }
  for (i = 0; i < size; i++) {
    snprintf(key, sizeof key, "addr-%d", i);
    snprintf(want, sizeof want, "value;with;semicolons-%d", i);
    if (PMI2_KVS_Get(jobid, PMI2_ID_NULL, key, val, sizeof val, &len) != PMI2_SUCCESS || strcmp(val, want)) {
      printf("rank %d: get %s gave %s\n", rank, key, val); return 1;
    }
  }
  if (PMI2_Info_GetJobAttr("PMI_process_mapping", val, sizeof val, &found) != PMI2_SUCCESS || !found) {
    printf("no mapping\n"); return 1;
  }
  printf("pmi2 rank %d of %d appnum %d mapping %s ok\n", rank, size, appnum, val);
  PMI2_Finalize();
  return 0;
}
