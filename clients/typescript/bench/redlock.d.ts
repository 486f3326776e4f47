// The part of redlock 4's API the benchmark uses (the package ships no types).
declare module "redlock" {
  interface Lock {
    unlock(): Promise<void>;
  }
  interface Options {
    retryCount?: number;
    retryDelay?: number;
    driftFactor?: number;
  }
  class Redlock {
    constructor(clients: unknown[], options?: Options);
    lock(resource: string, ttl: number): Promise<Lock>;
    quit(): Promise<void>;
  }
  export default Redlock;
}
